/* memra-server: the HTTP side (libmicrohttpd): routing, limits, the API
 * key, and the handlers of every endpoint. A thread per connection: a
 * handler blocks while its request waits in the scheduler, waking on news
 * or every WAIT_MS to see whether its client is still there. */
#ifndef MEMRA_SERVER_HTTP_H
#define MEMRA_SERVER_HTTP_H

#include <stddef.h>

#include "api.h"
#include "scheduler.h"

typedef struct http_config {
    const char *host;          /* address to listen on */
    int port;                  /* 0 = any free port (http_port says which) */
    const char *api_key;       /* NULL = none */
    size_t max_body;           /* request body bytes at most (413 beyond) */
    unsigned timeout_s;        /* idle connection timeout, 0 = none */
    unsigned max_connections;
    int verbose;               /* log /health and /metrics requests too */
} http_config_t;

typedef struct http_server http_server_t;

/* Starts listening. The scheduler and model must outlive the server.
 * NULL after printing why on stderr. */
http_server_t *http_start(const http_config_t *cfg, sched_t *sched, const api_model_t *model);

/* The port it listens on. */
int http_port(const http_server_t *h);

/* Closes every connection (their requests released) and frees H. Stop the
 * scheduler first so that waiting handlers return. NULL is a no-op. */
void http_stop(http_server_t *h);

#endif
