import textwrap

import pytest

from llmload.core.scenario import Scenario, ScenarioError, load_scenario, resolve

K = 1024


def write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_defaults_are_the_seed_run():
    s = Scenario()
    assert s.contexts == (0, 16 * K, 32 * K, 48 * K)
    assert s.prefill_contexts == (8 * K, 16 * K, 32 * K, 48 * K)
    assert s.concurrency == (1, 2, 4, 8, 16, 32, 64, 128)
    assert s.duration_s == 30.0
    assert s.max_tokens == 8192
    assert s.endpoint == "completions"
    assert s.sim_profile == "rtx3090-r1-qwen14b-awq"
    assert s.host is None and s.warmup is True and s.prefill_repeats == 1


def test_load_scenario_accepts_cli_forms(tmp_path):
    path = write(
        tmp_path,
        """
        name: quick
        host: http://localhost:8000/
        contexts: "0,16K"
        prefill-contexts: [8K, 16384]
        concurrency: 1,2,4
        duration: 2m
        max_tokens: 1K
        kv_cache_tokens: 59,200
        warmup: no
        request_timeout: 90s
        launch_command: |
          vllm serve model
          --max-model-len 57344
        """,
    )
    values = load_scenario(path)
    assert values == {
        "name": "quick",
        "host": "http://localhost:8000",
        "contexts": (0, 16 * K),
        "prefill_contexts": (8 * K, 16 * K),
        "concurrency": (1, 2, 4),
        "duration_s": 120.0,
        "max_tokens": 1024,
        "kv_cache_tokens": 59_200,
        "warmup": False,
        "request_timeout_s": 90.0,
        "launch_command": "vllm serve model\n--max-model-len 57344",
    }


def test_empty_file_sets_nothing(tmp_path):
    assert load_scenario(write(tmp_path, "")) == {}


def test_precedence_cli_over_file_over_defaults(tmp_path):
    file_values = load_scenario(
        write(tmp_path, "duration: 10s\nmax_tokens: 512\nconcurrency: [1, 2]\n")
    )
    s = resolve(Scenario(), file_values, {"duration_s": "5s", "max_tokens": None, "model": "m"})
    assert s.duration_s == 5.0  # command line wins
    assert s.max_tokens == 512  # None on the command line = not given: the file's value
    assert s.concurrency == (1, 2)  # file over default
    assert s.contexts == Scenario().contexts  # default
    assert s.model == "m"
    assert resolve(None, None, None) == Scenario()
    assert resolve({"duration": "1m"}, {}, {}).duration_s == 60.0


@pytest.mark.parametrize(
    "key", ["api_key", "api-key", "OPENAI_API_KEY", "headers", "authorization"]
)
def test_secrets_are_rejected_in_files(tmp_path, key):
    path = write(tmp_path, f"{key}: sk-123\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert str(path) in message and key in message and "secret" in message
    assert "sk-123" not in message
    assert "\n" not in message


def test_credentials_in_host_are_rejected(tmp_path):
    with pytest.raises(ScenarioError, match="credentials"):
        load_scenario(write(tmp_path, "host: http://user:pw@server:8000\n"))


def test_unknown_key_names_the_valid_ones(tmp_path):
    path = write(tmp_path, "contexts: 0\ncontext: 16K\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert "'context'" in message and "valid keys" in message and "prefill_contexts" in message


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("contexts: 0,abc\n", "'contexts'"),
        ("duration: 0s\n", "'duration'"),
        ("concurrency: []\n", "'concurrency'"),
        ("concurrency: 0\n", "'concurrency'"),
        ("endpoint: speech\n", "'endpoint'"),
        ("warmup: maybe\n", "'warmup'"),
        ("host: localhost:8000\n", "'host'"),
        ("max_tokens: 0\n", "'max_tokens'"),
        ("workers: -1\n", "'workers'"),
        ("duration: 10s\nduration_s: 20\n", "twice"),
        ("- a\n- b\n", "top level"),
        ("contexts: [0\n", "not valid YAML"),
    ],
)
def test_bad_values_name_file_and_key(tmp_path, text, fragment):
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert fragment in message and str(path) in message and "\n" not in message


def test_missing_file(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "nope.yaml")


def test_cli_errors_say_command_line():
    with pytest.raises(ScenarioError, match="^command line: --duration: "):
        resolve(Scenario(), {}, {"duration_s": "soon"})
    with pytest.raises(ScenarioError, match="secret"):
        resolve(Scenario(), {}, {"api_key": "x"})


def test_to_dict_round_trip_and_no_secret_field():
    s = resolve(Scenario(), {}, {"contexts": "0,8K", "host": "https://h:1"})
    d = s.to_dict()
    assert d["contexts"] == [0, 8 * K]
    assert not any("key" in k or "auth" in k for k in d)
    assert Scenario.from_dict(d) == s


def test_direct_construction_validates():
    assert Scenario(contexts=["16K"]).contexts == (16 * K,)
    with pytest.raises(ScenarioError, match="'endpoint'"):
        Scenario(endpoint="speech")


def test_server_hardware_and_info_from_the_command_line_or_a_file(tmp_path):
    from llmload.core.scenario import load_scenario, resolve
    f = tmp_path / "s.yaml"
    f.write_text("server_hardware:\n  gpu: RTX 3090\n  vram_gb: 24\nserver_info:\n  quantization: AWQ\n")
    sc = resolve(None, load_scenario(f), {"server_info": "backend=cuda,build=v0.32"})
    assert sc.server_hardware == {"gpu": "RTX 3090", "vram_gb": 24}
    assert sc.server_info == {"backend": "cuda", "build": "v0.32"}
    assert resolve(None, {}, {"server_hardware": "vram_gb=24,ram_gb=31.5"}).server_hardware == {
        "vram_gb": 24, "ram_gb": 31.5}
    with pytest.raises(ScenarioError, match="key=value"):
        resolve(None, {}, {"server_hardware": "just-a-word"})
