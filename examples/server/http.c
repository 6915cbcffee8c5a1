/* memra-server: HTTP (http.h) on libmicrohttpd, a thread per connection.
 *
 * A request's life: the first call of the access handler (headers only)
 * routes it and answers at once what needs no body (404, 405, 401, 413 by
 * Content-Length); later calls collect the body up to the limit; the
 * last call (no more data) answers. A completion request is submitted to
 * the scheduler there: a non-stream one waits in that call, a stream one
 * returns a response whose reader callback waits for each chunk. MHD's
 * request-completed callback releases the scheduler request, which
 * cancels the sequence if the client left before the end. */
#include "http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "metrics.h"

#define WAIT_MS 100 /* how often a waiting handler looks at its client */

enum route { R_UNKNOWN, R_CHAT, R_COMPLETIONS, R_MODELS, R_HEALTH, R_METRICS };

/* The statuses the server answers with, for /metrics. */
static const int k_statuses[] = {200, 400, 401, 404, 405, 413, 500, 503};
#define N_STATUSES (int)(sizeof k_statuses / sizeof *k_statuses)

struct http_server {
    http_config_t cfg;
    sched_t *sched;
    const api_model_t *model;
    struct MHD_Daemon *daemon;
    int port;
    pthread_mutex_t mu;             /* the counters */
    uint64_t by_status[N_STATUSES];
    uint64_t next_id;               /* request ids and default seeds */
    uint64_t seed_base;
};

/* One HTTP request (MHD's per-request pointer). */
typedef struct conn {
    http_server_t *srv;
    enum route route;
    char method[16], url[200];  /* copies, for the log line after the request */
    double t0;
    int status;               /* answered with, 0 = not yet */
    char *body;
    size_t n_body, cap_body;
    int too_large;
    int fd;                   /* the client socket, to notice it going away */
    /* a completion request */
    sched_req_t *req;
    int chat, stream, include_usage;
    char id[48];
    long created;
    int32_t n_prompt, n_gen;
    const char *finish;
    /* the stream's SSE bytes not yet handed to MHD */
    char *sse;
    size_t n_sse, off_sse, cap_sse;
    int role_sent, stream_done;
} conn_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* splitmix64: request ids and the seeds of requests that name none. */
static uint64_t next_random(http_server_t *h)
{
    uint64_t z = h->seed_base + 0x9e3779b97f4a7c15ull * __atomic_add_fetch(&h->next_id, 1, __ATOMIC_RELAXED);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static enum route route_of(const char *url)
{
    /* the OpenAI paths, also without /v1 (as llama.cpp's server takes them) */
    if (!strncmp(url, "/v1/", 4))
        url += 3;
    if (!strcmp(url, "/chat/completions"))
        return R_CHAT;
    if (!strcmp(url, "/completions"))
        return R_COMPLETIONS;
    if (!strcmp(url, "/models"))
        return R_MODELS;
    if (!strcmp(url, "/health"))
        return R_HEALTH;
    if (!strcmp(url, "/metrics"))
        return R_METRICS;
    return R_UNKNOWN;
}

static void count_status(http_server_t *h, int status)
{
    pthread_mutex_lock(&h->mu);
    for (int i = 0; i < N_STATUSES; i++)
        if (k_statuses[i] == status)
            h->by_status[i]++;
    pthread_mutex_unlock(&h->mu);
}

/* Queues BODY (malloc'ed, taken) with STATUS. */
static enum MHD_Result respond(struct MHD_Connection *c, conn_t *k, int status, const char *type, char *body)
{
    if (!body)
        return MHD_NO; /* out of memory: drop the connection */
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 405)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW,
                                k->route == R_CHAT || k->route == R_COMPLETIONS ? "POST" : "GET");
    if (status == 401)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    if (ok == MHD_YES) {
        k->status = status;
        count_status(k->srv, status);
    }
    return ok;
}

static enum MHD_Result respond_error(struct MHD_Connection *c, conn_t *k, const api_error_t *e)
{
    return respond(c, k, e->status, "application/json", api_error_json(e));
}

static enum MHD_Result fail(struct MHD_Connection *c, conn_t *k, int status, const char *type, const char *code,
                            const char *msg)
{
    api_error_t e;
    api_error_set(&e, status, type, code, NULL, "%s", msg);
    return respond_error(c, k, &e);
}

/* Whether the client closed its end: the handler may wait long, and MHD
 * does not look at the socket meanwhile. */
static int peer_gone(const conn_t *k)
{
    if (k->fd < 0)
        return 0;
    struct pollfd p = {.fd = k->fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Constant-time comparison, so the key cannot be guessed byte by byte
 * from response times. */
static int key_ok(const http_server_t *h, struct MHD_Connection *c)
{
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!auth || strncmp(auth, "Bearer ", 7))
        return 0;
    const char *got = auth + 7, *want = h->cfg.api_key;
    const size_t n = strlen(want);
    if (strlen(got) != n)
        return 0;
    unsigned char diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(got[i] ^ want[i]);
    return diff == 0;
}

/* ---- completions --------------------------------------------------------- */

static void sse_add(conn_t *k, const char *s, size_t n)
{
    if (k->n_sse + n > k->cap_sse) {
        size_t cap = k->cap_sse ? k->cap_sse : 1024;
        while (cap < k->n_sse + n)
            cap *= 2;
        char *p = realloc(k->sse, cap);
        if (!p)
            return; /* the caller sees n_sse unchanged and ends the stream */
        k->sse = p;
        k->cap_sse = cap;
    }
    memcpy(k->sse + k->n_sse, s, n);
    k->n_sse += n;
}

/* One "data: JSON\n\n" event (JSON taken); 0, or -1 when out of memory. */
static int sse_event(conn_t *k, char *json)
{
    if (!json)
        return -1;
    const size_t want = k->n_sse + strlen(json) + 8;
    sse_add(k, "data: ", 6);
    sse_add(k, json, strlen(json));
    sse_add(k, "\n\n", 2);
    free(json);
    return k->n_sse == want ? 0 : -1;
}

/* The events for one update of the request; sets stream_done at the end. */
static int sse_update(conn_t *k, const sched_update_t *u)
{
    const api_model_t *m = k->srv->model;
    int rc = 0;
    k->n_gen = u->n_gen; /* for the log line, also when the client leaves early */
    if (u->text)
        rc |= sse_event(k, api_chunk_json(m, k->chat, k->id, k->created, 0, u->text, u->n_text, SCHED_RUNNING, 0,
                                          -1, 0));
    if (u->finish == SCHED_RUNNING)
        return rc;
    k->n_prompt = u->n_prompt;
    k->n_gen = u->n_gen;
    if (u->finish == SCHED_ERROR) {
        api_error_t e;
        api_error_set(&e, 500, "server_error", NULL, NULL, "%s", u->error);
        rc |= sse_event(k, api_error_json(&e));
        k->finish = "error";
    } else {
        /* the finish chunk carries the usage too, as llama.cpp's server does */
        rc |= sse_event(k, api_chunk_json(m, k->chat, k->id, k->created, 0, NULL, 0, u->finish, 0, u->n_prompt,
                                          u->n_gen));
        if (k->include_usage)
            rc |= sse_event(k, api_chunk_json(m, k->chat, k->id, k->created, 0, NULL, 0, u->finish, 1, u->n_prompt,
                                              u->n_gen));
        k->finish = api_finish_reason(u->finish);
    }
    sse_add(k, "data: [DONE]\n\n", 14);
    k->stream_done = 1;
    return rc;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    conn_t *k = cls;
    (void)pos;
    while (k->off_sse == k->n_sse) {
        k->n_sse = k->off_sse = 0;
        if (k->stream_done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (k->chat && !k->role_sent) {
            k->role_sent = 1;
            if (sse_event(k, api_chunk_json(k->srv->model, 1, k->id, k->created, 1, NULL, 0, SCHED_RUNNING, 0, -1,
                                            0)))
                return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        sched_update_t u;
        const int news = sched_wait(k->srv->sched, k->req, WAIT_MS, &u);
        if (peer_gone(k)) { /* sooner than the next write would tell */
            free(u.text);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (!news)
            continue;
        const int bad = sse_update(k, &u);
        free(u.text);
        if (bad)
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = k->n_sse - k->off_sse < max ? k->n_sse - k->off_sse : max;
    memcpy(buf, k->sse + k->off_sse, n);
    k->off_sse += n;
    return (ssize_t)n;
}

/* A non-stream request: waits for the whole text, then answers. */
static enum MHD_Result complete_whole(struct MHD_Connection *c, conn_t *k)
{
    char *text = NULL;
    size_t n = 0;
    sched_update_t u;
    for (;;) {
        /* looked at on every wake-up: a running request brings news at each
         * token, so waiting for a quiet moment could be waiting to the end */
        const int news = sched_wait(k->srv->sched, k->req, WAIT_MS, &u);
        if (peer_gone(k)) {
            free(u.text);
            free(text);
            return MHD_NO; /* closes the connection; the completed callback cancels */
        }
        if (!news)
            continue;
        if (u.text) {
            char *p = realloc(text, n + u.n_text + 1);
            if (!p) {
                free(u.text);
                free(text);
                return fail(c, k, 500, "server_error", NULL, "out of memory");
            }
            text = p;
            memcpy(text + n, u.text, u.n_text);
            n += u.n_text;
            text[n] = 0;
            free(u.text);
        }
        if (u.finish != SCHED_RUNNING)
            break;
    }
    k->n_prompt = u.n_prompt;
    k->n_gen = u.n_gen;
    if (u.finish == SCHED_ERROR) {
        free(text);
        k->finish = "error";
        return fail(c, k, 500, "server_error", NULL, u.error);
    }
    k->finish = api_finish_reason(u.finish);
    char *body = api_response_json(k->srv->model, k->chat, k->id, k->created, text, n, u.finish, u.n_prompt,
                                   u.n_gen);
    free(text);
    return respond(c, k, 200, "application/json", body);
}

static enum MHD_Result handle_completion(struct MHD_Connection *c, conn_t *k)
{
    http_server_t *h = k->srv;
    api_request_t ar;
    api_error_t e;
    if (api_parse_request(h->model, k->route == R_CHAT, k->body ? k->body : "", k->n_body, next_random(h), &ar, &e))
        return respond_error(c, k, &e);
    k->chat = ar.chat;
    k->stream = ar.stream;
    k->include_usage = ar.include_usage;
    k->created = (long)time(NULL);
    snprintf(k->id, sizeof k->id, "%s%016llx", k->chat ? "chatcmpl-" : "cmpl-", (unsigned long long)next_random(h));
    k->n_prompt = ar.gen.n_prompt;
    if (!(k->req = sched_req_new(&ar.gen))) {
        api_request_clear(&ar);
        return fail(c, k, 500, "server_error", NULL, "out of memory");
    }
    if (sched_submit(h->sched, k->req)) {
        sched_release(h->sched, k->req);
        k->req = NULL;
        return fail(c, k, 503, "server_error", "queue_full",
                    "the server is busy: every sequence slot is taken and the queue is full; retry later");
    }
    if (!k->stream)
        return complete_whole(c, k);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, k, NULL);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    if (ok == MHD_YES) {
        k->status = 200;
        count_status(h, 200);
    }
    return ok;
}

/* ---- the other endpoints ------------------------------------------------- */

static enum MHD_Result handle_metrics(struct MHD_Connection *c, conn_t *k)
{
    http_server_t *h = k->srv;
    sched_stats_t st;
    sched_get_stats(h->sched, &st);
    metrics_status_t by[N_STATUSES];
    pthread_mutex_lock(&h->mu);
    for (int i = 0; i < N_STATUSES; i++)
        by[i] = (metrics_status_t){k_statuses[i], h->by_status[i]};
    pthread_mutex_unlock(&h->mu);
    return respond(c, k, 200, "text/plain; version=0.0.4", metrics_text(&st, by, N_STATUSES));
}

static enum MHD_Result handle(struct MHD_Connection *c, conn_t *k)
{
    switch (k->route) {
    case R_CHAT:
    case R_COMPLETIONS: return handle_completion(c, k);
    case R_MODELS: return respond(c, k, 200, "application/json", api_models_json(k->srv->model));
    case R_HEALTH: return respond(c, k, 200, "application/json", strdup("{\"status\":\"ok\"}"));
    case R_METRICS: return handle_metrics(c, k);
    default: return MHD_NO;
    }
}

/* What can be answered from the request line and headers alone; MHD_YES
 * with nothing queued when the request goes on. */
static enum MHD_Result check_head(struct MHD_Connection *c, conn_t *k)
{
    const http_server_t *h = k->srv;
    if (k->route == R_UNKNOWN) {
        char msg[300];
        snprintf(msg, sizeof msg, "no endpoint %.40s %.200s", k->method, k->url);
        return fail(c, k, 404, "invalid_request_error", "not_found", msg);
    }
    const int post = k->route == R_CHAT || k->route == R_COMPLETIONS;
    if (strcmp(k->method, post ? "POST" : "GET")) {
        char msg[300];
        snprintf(msg, sizeof msg, "%.200s takes %s, not %.40s", k->url, post ? "POST" : "GET", k->method);
        return fail(c, k, 405, "invalid_request_error", "method_not_allowed", msg);
    }
    if (h->cfg.api_key && k->route != R_HEALTH && !key_ok(h, c))
        return fail(c, k, 401, "invalid_request_error", "invalid_api_key",
                    "invalid API key: send 'Authorization: Bearer KEY'");
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > h->cfg.max_body)
        k->too_large = 1;
    if (k->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than %zu bytes", h->cfg.max_body);
        return fail(c, k, 413, "invalid_request_error", "request_too_large", msg);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    conn_t *k = *con_cls;
    if (!k) {
        if (!(k = calloc(1, sizeof *k)))
            return MHD_NO;
        *con_cls = k;
        k->srv = cls;
        snprintf(k->url, sizeof k->url, "%s", url);
        snprintf(k->method, sizeof k->method, "%s", method);
        k->route = route_of(url);
        k->t0 = now_s();
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        k->fd = ci ? ci->connect_fd : -1;
        return check_head(c, k);
    }
    if (k->status) { /* answered early: the rest of the body is dropped */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        const size_t n = *upload_size;
        *upload_size = 0;
        if (k->too_large || k->n_body + n > k->srv->cfg.max_body) {
            k->too_large = 1; /* read to the end (chunked uploads), answered below */
            return MHD_YES;
        }
        if (k->n_body + n + 1 > k->cap_body) {
            size_t cap = k->cap_body ? k->cap_body : 4096;
            while (cap < k->n_body + n + 1)
                cap *= 2;
            char *p = realloc(k->body, cap);
            if (!p)
                return MHD_NO;
            k->body = p;
            k->cap_body = cap;
        }
        memcpy(k->body + k->n_body, upload, n);
        k->n_body += n;
        k->body[k->n_body] = 0;
        return MHD_YES;
    }
    if (k->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than %zu bytes", k->srv->cfg.max_body);
        return fail(c, k, 413, "invalid_request_error", "request_too_large", msg);
    }
    return handle(c, k);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)c;
    http_server_t *h = cls;
    conn_t *k = *con_cls;
    if (!k)
        return;
    *con_cls = NULL;
    const int gone = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK;
    if (h->cfg.verbose || (k->route != R_HEALTH && k->route != R_METRICS)) {
        char extra[128] = "";
        if (k->req)
            snprintf(extra, sizeof extra, " %d+%d tokens %s%s", k->n_prompt, k->n_gen, k->finish ? k->finish : "-",
                     gone ? " (client gone)" : "");
        fprintf(stderr, "memra-server: %s %s %d%s %.3f s\n", k->method, k->url, k->status, extra, now_s() - k->t0);
    }
    sched_release(h->sched, k->req);
    free(k->body);
    free(k->sse);
    free(k);
}

http_server_t *http_start(const http_config_t *cfg, sched_t *sched, const api_model_t *model)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", cfg->port);
    int gai = getaddrinfo(cfg->host, port, &hints, &ai);
    if (gai) {
        fprintf(stderr, "memra-server: --host %s: %s\n", cfg->host, gai_strerror(gai));
        return NULL;
    }
    http_server_t *h = calloc(1, sizeof *h);
    if (!h) {
        freeaddrinfo(ai);
        fprintf(stderr, "memra-server: out of memory\n");
        return NULL;
    }
    h->cfg = *cfg;
    h->sched = sched;
    h->model = model;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    h->seed_base = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
    pthread_mutex_init(&h->mu, NULL);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    h->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h,
                                 MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                                 MHD_OPTION_CONNECTION_TIMEOUT, cfg->timeout_s,
                                 MHD_OPTION_CONNECTION_LIMIT, cfg->max_connections,
                                 MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->daemon) {
        fprintf(stderr, "memra-server: cannot listen on %s port %d (in use, or no permission)\n", cfg->host,
                cfg->port);
        pthread_mutex_destroy(&h->mu);
        free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : cfg->port;
    return h;
}

int http_port(const http_server_t *h) { return h->port; }

void http_stop(http_server_t *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->daemon);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
