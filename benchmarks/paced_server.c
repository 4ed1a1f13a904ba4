/* A paced SSE server for llmload's client-capacity benchmark (benchmarks/client_capacity.py).
 *
 * One epoll loop, one periodic timerfd. Every tick it writes one OpenAI-shaped completions
 * chunk to every open stream: chunked transfer encoding, `usage.completion_tokens` as a
 * continuous cumulative count, the chunk's CLOCK_MONOTONIC send time inside it
 * ("t_send_ns"); the last token carries finish_reason "length", then `data: [DONE]` and the
 * end of the body. Connections are kept alive: any POST starts a stream of `max_tokens`
 * tokens (from the JSON body). With --log PATH it also appends a binary record per event
 * (uint32 stream key, uint32 token number from 1, uint64 send time in ns), flushed at the
 * end of each stream; the stream key is the number in the body's `"user": "s<NUMBER>"`.
 *
 * Build: cc -O2 -o paced_server paced_server.c
 * Run:   paced_server [--port 0] [--tick-ms 1] [--log PATH]
 * Prints "listening on http://127.0.0.1:PORT" and serves until SIGTERM/SIGINT; at exit it
 * prints "ticks T late L events E" (L: ticks that came more than one tick late).
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

typedef struct {
    int fd;
    int streaming;
    int active_index;
    uint32_t key;
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

/* A whole request in c->in: start its stream. Returns bytes consumed, 0 if incomplete. */
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
    if (strncmp(c->in, "POST ", 5) != 0) {
        static const char nf[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
        send_bytes(c, nf, sizeof nf - 1);
        return head_len + (size_t)clen;
    }
    c->max_tokens = (uint32_t)json_int_after(body, (size_t)clen, "\"max_tokens\"", 16);
    if (c->max_tokens < 1) c->max_tokens = 1;
    c->key = (uint32_t)json_int_after(body, (size_t)clen, "\"user\"", 0);
    c->sent = 0;
    c->streaming = 1;
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                               "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n";
    send_bytes(c, head, sizeof head - 1);
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

/* One event (one token) on stream c; the end of the stream after its last token. */
static int send_event(conn_t *c) {
    char ev[512], frame[600];
    uint32_t k = ++c->sent;
    int last = k >= c->max_tokens;
    uint64_t t = mono_ns();
    int n = snprintf(ev, sizeof ev,
                     "data: {\"id\":\"cmpl-%u\",\"object\":\"text_completion\",\"created\":0,\"model\":\"m\","
                     "\"choices\":[{\"index\":0,\"text\":\" tok\",\"logprobs\":null,\"finish_reason\":%s}],"
                     "\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":%u,\"total_tokens\":%u},"
                     "\"t_send_ns\":%llu}\n\n",
                     c->key, last ? "\"length\"" : "null", k, k + 1, (unsigned long long)t);
    int m = snprintf(frame, sizeof frame, "%x\r\n%.*s\r\n", n, n, ev);
    if (!send_bytes(c, frame, (size_t)m)) return 0;
    n_events++;
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

static void on_tick(void) {
    /* Streams can end (and leave the active list) during the pass: walk a snapshot. */
    static int snap[MAX_FD];
    int n = n_active;
    memcpy(snap, active, sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) {
        conn_t *c = conns[snap[i]];
        if (c && c->streaming && !send_event(c)) close_conn(c);
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
        else { fprintf(stderr, "usage: %s [--port P] [--tick-ms MS] [--log PATH]\n", argv[0]); return 2; }
    }
    if (tick_ms <= 0) { fprintf(stderr, "--tick-ms must be > 0\n"); return 2; }
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
    long tick_ns = (long)(tick_ms * 1e6);
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
    while (!stop) {
        int n = epoll_wait(epfd, evs, 1024, 200);
        if (n < 0) {
            if (errno == EINTR) continue;
            perror("epoll_wait");
            break;
        }
        int ticked = 0;
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == tfd) {
                uint64_t expirations = 0;
                if (read(tfd, &expirations, sizeof expirations) == sizeof expirations) {
                    n_ticks += expirations;
                    if (expirations > 1) n_late += expirations - 1;
                    ticked = 1;
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
        /* One event per stream per tick, however late: a late tick is counted, not caught up. */
        if (ticked) on_tick();
    }
    if (logf) fclose(logf);
    printf("ticks %llu late %llu events %llu\n", n_ticks, n_late, n_events);
    fflush(stdout);
    return 0;
}
