/* memra-server: an OpenAI-compatible HTTP server for one model.
 *
 *   memra-server [-m MODEL] [--host ADDR] [--port N] [-c CTX] [--parallel N] [--queue N] [OPTIONS]
 *
 * POST /v1/chat/completions and /v1/completions (stream or not), GET
 * /v1/models, /health and /metrics (docs/SERVER.md). The model is loaded
 * once; a scheduler thread (scheduler.c) runs up to --parallel sequences, each
 * on its own cache of --ctx-size tokens, all advanced together by one
 * batched step per round, and the HTTP side (http.c,
 * libmicrohttpd) turns requests (api_request.c, jansson) into its work.
 * SIGINT or SIGTERM ends it: waiting requests fail, connections close. */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <memra/memra.h>

#include "api.h"
#include "cli.h"
#include "common.h"
#include "http.h"
#include "scheduler.h"

enum {
    OPT_HOST = CLI_LONG_ONLY,
    OPT_PORT,
    OPT_PARALLEL,
    OPT_QUEUE,
    OPT_ALIAS,
    OPT_API_KEY,
    OPT_MAX_BODY,
    OPT_TIMEOUT,
    OPT_MAX_CONN,
    OPT_DEVICE,
    OPT_CHUNK,
    OPT_BATCH_CHUNK,
};

static const cli_opt_t k_opts[] = {
    {'m', "model", "FILE", "GGUF model (default: the bundled default model; env MEMRA_DEFAULT_MODEL)"},
    {OPT_ALIAS, "alias", "NAME", "the model's id in the API: what requests name in \"model\" and /v1/models\n"
                                 "lists (default: the file name without .gguf)"},
    {OPT_HOST, "host", "ADDR", "address to listen on, IPv4 or IPv6 or a name (default: 127.0.0.1)"},
    {OPT_PORT, "port", "N", "TCP port, 0 = any free one (the start line on stderr names it) (default: 8080)"},
    {'c', "ctx-size", "N", "context of each sequence in tokens, prompt and reply together, 1..1048576\n"
                           "(default: 4096)"},
    {OPT_PARALLEL, "parallel", "N", "sequences run at once, each with its own cache (also -np), 1..256\n"
                                    "(default: 4)"},
    {OPT_QUEUE, "queue", "N", "requests that may wait for a free sequence; more get 503, 0..65536 (default: 64)"},
    {OPT_API_KEY, "api-key", "KEY", "require 'Authorization: Bearer KEY' on every endpoint but /health\n"
                                    "(default: none; env MEMRA_API_KEY)"},
    {OPT_MAX_BODY, "max-body", "BYTES", "largest request body; larger ones get 413, 1024..1073741824\n"
                                        "(default: 1048576)"},
    {OPT_TIMEOUT, "timeout", "S", "close a connection idle for S seconds, 0 = never (default: 600)"},
    {OPT_MAX_CONN, "max-connections", "N", "connections at once (a thread each), 1..65536 (default: 256)"},
    {OPT_DEVICE, "device", "DEV", "cpu, cuda or cuda:N (default: cpu)"},
    {'t', "threads", "N", "CPU threads, 0 = all cores (default: 0)"},
    {OPT_CHUNK, "chunk", "N", "the model's prefill chunk in tokens (longer prompt pieces run in chunks),\n"
                              "0 = the model's default (env MEMRA_PRIME_CHUNK, else 2048) (default: 0)"},
    {OPT_BATCH_CHUNK, "batch-prefill-chunk", "N", "prompt tokens a new sequence feeds per batched step, so the\n"
                                                  "decodes of the others wait at most one chunk, 1..1048576\n"
                                                  "(default: 256)"},
    {'v', "verbose", NULL, "log /health and /metrics requests too (default: only the others)"},
};

static const cli_prog_t k_prog = {
    "memra-server",
    "[-m MODEL] [--host ADDR] [--port N] [-c CTX] [--parallel N] [--queue N] [OPTIONS]",
    "An OpenAI-compatible HTTP server: POST /v1/chat/completions (through the model's chat template)\n"
    "and /v1/completions, streamed (server-sent events) or not; GET /v1/models, /health and /metrics\n"
    "(Prometheus). Up to --parallel sequences run at once, the rest wait in a queue of --queue.\n"
    "Each request is logged on stderr; SIGINT or SIGTERM stops the server. docs/SERVER.md has more.",
    k_opts,
    sizeof k_opts / sizeof *k_opts,
    "memra-server -m model.gguf --port 8080\n"
    "memra-server -m model.gguf --device cuda:0 -c 8192 --parallel 8 --api-key secret\n"
    "curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\\n"
    "  -d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], \"max_tokens\": 64}'",
};

/* The file name of PATH without a .gguf ending, into BUF. */
static const char *model_id(const char *path, char *buf, size_t cap)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".gguf"))
        n -= 5;
    snprintf(buf, cap, "%.*s", (int)n, base);
    return buf;
}

int main(int argc, char **argv)
{
    const char *model_path = NULL, *device = "cpu", *alias = NULL;
    long n_ctx = 4096, parallel = 4, queue = 64, threads = 0, chunk = 0, batch_chunk = 256;
    http_config_t hc = {.host = "127.0.0.1", .port = 8080, .api_key = getenv("MEMRA_API_KEY"),
                        .max_body = 1 << 20, .timeout_s = 600, .max_connections = 256};
    for (int i = 1; i < argc; i++) /* llama.cpp's spelling of --parallel */
        if (!strcmp(argv[i], "-np"))
            argv[i] = (char *)"--parallel";
    cli_t c;
    cli_init(&c, &k_prog, argc, argv);
    for (int key; (key = cli_next(&c)) != -1;) {
        const char *v = c.arg;
        switch (key) {
        case 'm': model_path = v; break;
        case OPT_ALIAS: alias = v; break;
        case OPT_HOST: hc.host = v; break;
        case OPT_PORT: hc.port = (int)cli_long(&c, v, 0, 65535); break;
        case 'c': n_ctx = cli_long(&c, v, 1, 1 << 20); break;
        case OPT_PARALLEL: parallel = cli_long(&c, v, 1, 256); break;
        case OPT_QUEUE: queue = cli_long(&c, v, 0, 65536); break;
        case OPT_API_KEY: hc.api_key = v; break;
        case OPT_MAX_BODY: hc.max_body = (size_t)cli_long(&c, v, 1024, 1L << 30); break;
        case OPT_TIMEOUT: hc.timeout_s = (unsigned)cli_long(&c, v, 0, 1L << 30); break;
        case OPT_MAX_CONN: hc.max_connections = (unsigned)cli_long(&c, v, 1, 65536); break;
        case OPT_DEVICE: device = v; break;
        case 't': threads = cli_long(&c, v, 0, 4096); break;
        case OPT_CHUNK: chunk = cli_long(&c, v, 0, 1 << 20); break;
        case OPT_BATCH_CHUNK: batch_chunk = cli_long(&c, v, 1, 1 << 20); break;
        case 'v': hc.verbose = 1; break;
        }
    }
    if (c.first_operand < argc)
        cli_fail(&c, "unexpected argument '%s'", argv[c.first_operand]);
    if (hc.api_key && !*hc.api_key)
        hc.api_key = NULL;
    if (!model_path && !(model_path = default_model_path())) {
        fprintf(stderr, "memra-server: no -m given and the bundled default model was not found "
                        "(set MEMRA_DEFAULT_MODEL)\n");
        return 2;
    }
    if (alias && !*alias)
        cli_fail(&c, "--alias: empty name");

    /* The signals that stop the server are taken by sigwait below; every
     * thread started from here on inherits the mask. A client gone while
     * its response is written must not kill the process. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1;
    memra_engine_t *engine = NULL;
    memra_model_t *model = NULL;
    sched_t *sched = NULL;
    http_server_t *http = NULL;
    double t0 = example_seconds();
    if (example_load("memra-server", model_path, device, (int32_t)threads, (int32_t)chunk, NULL, NULL, &engine,
                     &model))
        goto out;
    const memra_tokenizer_t *tok = memra_model_tokenizer(model);
    if (!tok) {
        fprintf(stderr, "memra-server: %s has no tokenizer\n", model_path);
        goto out;
    }
    char id_buf[256];
    api_model_t am = {.tok = tok, .id = alias ? alias : model_id(model_path, id_buf, sizeof id_buf),
                      .n_ctx = (int32_t)n_ctx, .n_vocab = memra_model_n_vocab(model), .created = (long)time(NULL)};
    if (!(sched = sched_create(model, (int32_t)parallel, (int32_t)n_ctx, (int32_t)queue, (int32_t)batch_chunk)))
        goto out;
    if (!(http = http_start(&hc, sched, &am)))
        goto out;
    fprintf(stderr,
            "memra-server: listening on http://%s:%d (model %s: %s, %d layers, on %s; %ld sequences x %ld tokens, "
            "queue %ld%s; loaded in %.3f s)\n",
            hc.host, http_port(http), am.id, memra_model_arch(model), memra_model_n_layers(model), device, parallel,
            n_ctx, queue, hc.api_key ? ", API key required" : "", example_seconds() - t0);
    if (!memra_tokenizer_chat_template(tok))
        fprintf(stderr, "memra-server: the model has no chat template: /v1/chat/completions will fail\n");
    int sig = 0;
    sigwait(&stop, &sig);
    fprintf(stderr, "memra-server: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rc = 0;
out:
    sched_stop(sched); /* first: handlers waiting on requests return */
    http_stop(http);
    sched_free(sched);
    memra_model_free(model);
    memra_engine_destroy(engine);
    return rc;
}
