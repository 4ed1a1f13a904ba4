/* A paced OpenAI-compatible server for llmload's client-capacity benchmark
 * (benchmarks/client_capacity.py), which runs `llmload run --host` against it.
 *
 * One epoll loop, one periodic timerfd. Every tick it writes one completions chunk (about
 * 250 bytes with its framing) to every streaming request: chunked transfer encoding,
 * `usage.completion_tokens` as a continuous cumulative count, the chunk's CLOCK_MONOTONIC
 * send time inside it ("t_send_ns"); the last token carries finish_reason "length", then
 * `data: [DONE]` and the end of the body. Connections are kept alive.
 *
 * Modes: --slots 1 (bursts, the default): every stream is written at each tick, one after
 * another. --slots S: the tick is cut into S equal slots (the timer fires every tick / S)
 * and stream number i is written in slot i mod S, so the streams are spread evenly over
 * the tick. A late timer is counted and its missed slots are served at once, never twice.
 *
 * Requests: GET /v1/models lists one model, "m" (other GETs: 404). A POST whose body says
 * `"stream": false` gets one JSON completion whose usage.prompt_tokens is the prompt's
 * words (what llmload's probe calibrates its text prompts with). Any other POST starts
 * stream number KEY (1, 2, ... in arrival order) of `max_tokens` tokens: right after the
 * response head a key chunk counts KEY_SCALE * KEY tokens, and token k then counts
 * KEY_SCALE * KEY + k. A client's record of the stream thus says which stream it was
 * (its first chunk's tokens // KEY_SCALE; the key chunk is no token of the schedule).
 * With --log PATH each stream appends binary records (uint32 KEY, uint32 token number k,
 * uint64 CLOCK_MONOTONIC send time in ns; k = 0 is the key chunk), flushed at its end and
 * at exit.
 *
 * Build: cc -O2 -o paced_server paced_server.c
 * Run:   paced_server [--port 0] [--tick-ms 1] [--slots 1] [--log PATH]
 * Prints "listening on http://127.0.0.1:PORT" and serves until SIGTERM/SIGINT; at exit it
 * prints "ticks T late L events E" (L: timer periods that came more than one period late).
 * Linux only (epoll, timerfd). Listens on 127.0.0.1 only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MAX_FD 65536
#define IN_CAP 65536
#define KEY_SCALE 1000u

typedef struct {
    int fd;
    int streaming;
    int active_index;
    uint32_t key;
    uint32_t slot;
    uint32_t sent;
    uint32_t max_tokens;
    size_t inlen;
    char *in;
    char *out;
    size_t outlen, outcap, outoff;
} conn_t;

static conn_t *conns[MAX_FD];
static int active[MAX_FD];
static int n_active = 0;
static int epfd;
static FILE *logf = NULL;
static volatile sig_atomic_t stop = 0;
static unsigned long long n_events = 0, n_ticks = 0, n_late = 0;
static uint32_t n_slots = 1, next_key = 1;

typedef struct { uint32_t key; uint32_t k; uint64_t t_ns; } logrec_t;

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_signal(int sig) { (void)sig; stop = 1; }

static void set_events(conn_t *c, uint32_t ev) {
    struct epoll_event e = {.events = ev, .data.fd = c->fd};
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &e);
}

static void deactivate(conn_t *c) {
    if (c->active_index < 0) return;
    int i = c->active_index, last = active[--n_active];
    active[i] = last;
    conns[last]->active_index = i;
    c->active_index = -1;
}

static void close_conn(conn_t *c) {
    deactivate(c);
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    conns[c->fd] = NULL;
    free(c->in);
    free(c->out);
    free(c);
}

/* Write now where nothing is queued; queue what the socket does not take. 0 = closed. */
static int send_bytes(conn_t *c, const char *data, size_t len) {
    if (c->outlen == c->outoff) {
        c->outlen = c->outoff = 0;
        ssize_t w = send(c->fd, data, len, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK) return 0;
            w = 0;
        }
        if ((size_t)w == len) return 1;
        data += w;
        len -= (size_t)w;
        set_events(c, EPOLLIN | EPOLLOUT);
    }
    if (c->outlen + len > c->outcap) {
        size_t cap = c->outcap ? c->outcap : 4096;
        while (cap < c->outlen + len) cap *= 2;
        c->out = realloc(c->out, cap);
        c->outcap = cap;
    }
    memcpy(c->out + c->outlen, data, len);
    c->outlen += len;
    return 1;
}

static int flush_out(conn_t *c) {
    while (c->outoff < c->outlen) {
        ssize_t w = send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 1;
            return 0;
        }
        c->outoff += (size_t)w;
    }
    c->outlen = c->outoff = 0;
    set_events(c, EPOLLIN);
    return 1;
}

static long json_int_after(const char *body, size_t len, const char *key, long dflt) {
    const char *p = memmem(body, len, key, strlen(key));
    if (!p) return dflt;
    p += strlen(key);
    const char *end = body + len;
    while (p < end && (*p == ' ' || *p == ':' || *p == '"' || *p == 's')) p++;
    if (p >= end || *p < '0' || *p > '9') return dflt;
    return strtol(p, NULL, 10);
}

/* Words of the body's "prompt" (a string: spaces + 1; a list: commas + 1). */
static long prompt_words(const char *body, size_t len) {
    const char *p = memmem(body, len, "\"prompt\"", 8);
    if (!p) return 1;
    const char *end = body + len;
    p += 8;
    while (p < end && (*p == ' ' || *p == ':')) p++;
    if (p >= end) return 1;
    char close = *p == '[' ? ']' : '"', sep = *p == '[' ? ',' : ' ';
    long n = 1;
    for (p++; p < end && *p != close; p++) {
        if (*p == '\\') p++;
        else if (*p == sep) n++;
    }
    return n;
}

static void send_json(conn_t *c, const char *status, const char *json) {
    char head[256];
    int n = snprintf(head, sizeof head, "HTTP/1.1 %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n", status, strlen(json));
    send_bytes(c, head, (size_t)n);
    send_bytes(c, json, strlen(json));
}

static int send_event(conn_t *c);

/* A whole request in c->in: answer it or start its stream. Returns bytes consumed, 0 if
 * incomplete. */
static size_t try_request(conn_t *c) {
    char *end = memmem(c->in, c->inlen, "\r\n\r\n", 4);
    if (!end) return 0;
    size_t head_len = (size_t)(end - c->in) + 4;
    long clen = 0;
    for (char *p = c->in; p < end; p++) {
        if ((p == c->in || p[-1] == '\n') && strncasecmp(p, "content-length:", 15) == 0) {
            clen = strtol(p + 15, NULL, 10);
            break;
        }
    }
    if (c->inlen < head_len + (size_t)clen) return 0;
    const char *body = c->in + head_len;
    if (strncmp(c->in, "GET /v1/models ", 15) == 0) {
        send_json(c, "200 OK", "{\"object\":\"list\",\"data\":[{\"id\":\"m\",\"object\":\"model\"}]}");
        return head_len + (size_t)clen;
    }
    if (strncmp(c->in, "POST ", 5) != 0) {
        send_json(c, "404 Not Found", "{\"error\":\"not found\"}");
        return head_len + (size_t)clen;
    }
    if (memmem(body, (size_t)clen, "\"stream\":false", 14) || memmem(body, (size_t)clen, "\"stream\": false", 15)) {
        char json[512];
        long w = prompt_words(body, (size_t)clen);
        snprintf(json, sizeof json, "{\"id\":\"cmpl-0\",\"object\":\"text_completion\",\"created\":0,\"model\":\"m\","
                 "\"choices\":[{\"index\":0,\"text\":\" tok\",\"logprobs\":null,\"finish_reason\":\"length\"}],"
                 "\"usage\":{\"prompt_tokens\":%ld,\"completion_tokens\":1,\"total_tokens\":%ld}}", w, w + 1);
        send_json(c, "200 OK", json);
        return head_len + (size_t)clen;
    }
    c->max_tokens = (uint32_t)json_int_after(body, (size_t)clen, "\"max_tokens\"", 16);
    if (c->max_tokens < 1) c->max_tokens = 1;
    c->key = next_key++;
    c->slot = (c->key - 1) % n_slots;
    c->sent = 0;
    c->streaming = 1;
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                               "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n";
    send_bytes(c, head, sizeof head - 1);
    if (!send_event(c)) return head_len + (size_t)clen; /* the key chunk; a dead socket is closed at its next read */
    c->active_index = n_active;
    active[n_active++] = c->fd;
    return head_len + (size_t)clen;
}

static void on_readable(conn_t *c) {
    for (;;) {
        if (c->inlen == IN_CAP) { close_conn(c); return; }
        ssize_t r = recv(c->fd, c->in + c->inlen, IN_CAP - c->inlen, 0);
        if (r == 0) { close_conn(c); return; }
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            close_conn(c);
            return;
        }
        c->inlen += (size_t)r;
    }
    while (!c->streaming && c->inlen) {
        size_t used = try_request(c);
        if (!used) break;
        memmove(c->in, c->in + used, c->inlen - used);
        c->inlen -= used;
    }
}

/* The key chunk (c->sent == 0) or one event (one token) on stream c; the end of the stream
 * after its last token. 0 = the socket is dead. */
static int send_event(conn_t *c) {
    char ev[512], frame[600];
    int key_chunk = c->sent == 0 && c->active_index < 0;
    uint32_t k = key_chunk ? 0 : ++c->sent;
    int last = !key_chunk && k >= c->max_tokens;
    uint32_t count = KEY_SCALE * c->key + k;
    uint64_t t = mono_ns();
    int n = snprintf(ev, sizeof ev,
                     "data: {\"id\":\"cmpl-%u\",\"object\":\"text_completion\",\"created\":0,\"model\":\"m\","
                     "\"choices\":[{\"index\":0,\"text\":\" tok\",\"logprobs\":null,\"finish_reason\":%s}],"
                     "\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":%u,\"total_tokens\":%u},"
                     "\"t_send_ns\":%llu}\n\n",
                     c->key, last ? "\"length\"" : "null", count, count + 1, (unsigned long long)t);
    int m = snprintf(frame, sizeof frame, "%x\r\n%.*s\r\n", n, n, ev);
    if (!send_bytes(c, frame, (size_t)m)) return 0;
    if (!key_chunk) n_events++;
    if (logf) {
        logrec_t rec = {c->key, k, t};
        fwrite(&rec, sizeof rec, 1, logf);
    }
    if (last) {
        static const char tail[] = "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n";
        if (!send_bytes(c, tail, sizeof tail - 1)) return 0;
        c->streaming = 0;
        deactivate(c);
        if (logf) fflush(logf);
    }
    return 1;
}

/* Slot `slot` of a tick: one event to every stream in it. */
static void on_slot(uint32_t slot) {
    /* Streams can end (and leave the active list) during the pass: walk a snapshot. */
    static int snap[MAX_FD];
    int n = n_active;
    memcpy(snap, active, sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) {
        conn_t *c = conns[snap[i]];
        if (c && c->streaming && c->slot == slot && !send_event(c)) close_conn(c);
    }
}

int main(int argc, char **argv) {
    int port = 0;
    double tick_ms = 1.0;
    const char *log_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc) port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tick-ms") && i + 1 < argc) tick_ms = atof(argv[++i]);
        else if (!strcmp(argv[i], "--log") && i + 1 < argc) log_path = argv[++i];
        else if (!strcmp(argv[i], "--slots") && i + 1 < argc) n_slots = (uint32_t)atoi(argv[++i]);
        else { fprintf(stderr, "usage: %s [--port P] [--tick-ms MS] [--slots S] [--log PATH]\n", argv[0]); return 2; }
    }
    if (tick_ms <= 0) { fprintf(stderr, "--tick-ms must be > 0\n"); return 2; }
    if (n_slots < 1) { fprintf(stderr, "--slots must be >= 1\n"); return 2; }
    if (log_path) {
        logf = fopen(log_path, "wb");
        if (!logf) { perror(log_path); return 1; }
        setvbuf(logf, NULL, _IOFBF, 1 << 22);
    }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(ls, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(ls, 4096) < 0) {
        perror("bind/listen");
        return 1;
    }
    socklen_t alen = sizeof addr;
    getsockname(ls, (struct sockaddr *)&addr, &alen);

    epfd = epoll_create1(0);
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    long tick_ns = (long)(tick_ms * 1e6 / n_slots);
    struct itimerspec its = {.it_interval = {tick_ns / 1000000000L, tick_ns % 1000000000L},
                             .it_value = {tick_ns / 1000000000L, tick_ns % 1000000000L}};
    timerfd_settime(tfd, 0, &its, NULL);
    struct epoll_event e = {.events = EPOLLIN, .data.fd = ls};
    epoll_ctl(epfd, EPOLL_CTL_ADD, ls, &e);
    e.data.fd = tfd;
    epoll_ctl(epfd, EPOLL_CTL_ADD, tfd, &e);
    printf("listening on http://127.0.0.1:%d\n", ntohs(addr.sin_port));
    fflush(stdout);

    struct epoll_event evs[1024];
    uint32_t cur_slot = 0;
    while (!stop) {
        int n = epoll_wait(epfd, evs, 1024, 200);
        if (n < 0) {
            if (errno == EINTR) continue;
            perror("epoll_wait");
            break;
        }
        uint64_t expired = 0;
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == tfd) {
                uint64_t expirations = 0;
                if (read(tfd, &expirations, sizeof expirations) == sizeof expirations) {
                    n_ticks += expirations;
                    if (expirations > 1) n_late += expirations - 1;
                    expired += expirations;
                }
            } else if (fd == ls) {
                for (;;) {
                    int cfd = accept4(ls, NULL, NULL, SOCK_NONBLOCK);
                    if (cfd < 0) break;
                    if (cfd >= MAX_FD) { close(cfd); continue; }
                    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    conn_t *c = calloc(1, sizeof *c);
                    c->fd = cfd;
                    c->active_index = -1;
                    c->in = malloc(IN_CAP);
                    conns[cfd] = c;
                    struct epoll_event ce = {.events = EPOLLIN, .data.fd = cfd};
                    epoll_ctl(epfd, EPOLL_CTL_ADD, cfd, &ce);
                }
            } else {
                conn_t *c = conns[fd];
                if (!c) continue;
                if (evs[i].events & EPOLLOUT) {
                    if (!flush_out(c)) { close_conn(c); continue; }
                }
                if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(c);
            }
        }
        /* Every slot that came due, each once: a late tick is counted, not caught up. */
        if (expired > n_slots) expired = n_slots;
        for (uint64_t i = 0; i < expired; i++) {
            on_slot(cur_slot);
            cur_slot = (cur_slot + 1) % n_slots;
        }
    }
    if (logf) fclose(logf);
    printf("ticks %llu late %llu events %llu\n", n_ticks, n_late, n_events);
    fflush(stdout);
    return 0;
}
