/* memra-server: the Prometheus exposition (metrics.h). Counters are
 * totals since the start (rate() gives per-second figures); the token
 * rates are the averages over the time spent in the model. */
#include "metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* open_memstream would do, but a fixed bound keeps it simple: the text
 * grows only with the number of distinct statuses. */
typedef struct out {
    char *p;
    size_t n, cap;
} out_t;

static void put(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out_t *o, const char *fmt, ...)
{
    if (!o->p || o->n >= o->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(o->p + o->n, o->cap - o->n, fmt, ap);
    va_end(ap);
    o->n += k > 0 ? (size_t)k : 0;
}

static void metric(out_t *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP memra_%s %s\n# TYPE memra_%s %s\n", name, help, name, type);
}

char *metrics_text(const sched_stats_t *st, const metrics_status_t *by_status, int n_status)
{
    out_t o = {malloc(8192 + 128 * (size_t)n_status), 0, 8192 + 128 * (size_t)n_status};
    if (!o.p)
        return NULL;
    metric(&o, "requests_total", "counter", "HTTP requests answered, by status code.");
    for (int i = 0; i < n_status; i++)
        put(&o, "memra_requests_total{status=\"%d\"} %llu\n", by_status[i].status,
            (unsigned long long)by_status[i].count);
    metric(&o, "prompt_tokens_total", "counter", "Prompt tokens of the sequences started.");
    put(&o, "memra_prompt_tokens_total %llu\n", (unsigned long long)st->prompt_tokens);
    metric(&o, "generated_tokens_total", "counter", "Tokens generated (sampled and not end-of-generation).");
    put(&o, "memra_generated_tokens_total %llu\n", (unsigned long long)st->generated_tokens);
    metric(&o, "queue_depth", "gauge", "Requests waiting for a sequence slot.");
    put(&o, "memra_queue_depth %d\n", st->queued);
    metric(&o, "queue_capacity", "gauge", "Requests that may wait (--queue); more get 503.");
    put(&o, "memra_queue_capacity %d\n", st->queue_cap);
    metric(&o, "active_sequences", "gauge", "Sequences holding a cache (prefilling or decoding).");
    put(&o, "memra_active_sequences %d\n", st->active);
    metric(&o, "sequence_slots", "gauge", "Caches in the pool (--parallel).");
    put(&o, "memra_sequence_slots %d\n", st->n_parallel);
    metric(&o, "sequences_total", "counter", "Sequences ended, by how: finished, cancelled (client gone), failed.");
    put(&o, "memra_sequences_total{result=\"finished\"} %llu\n", (unsigned long long)st->finished);
    put(&o, "memra_sequences_total{result=\"cancelled\"} %llu\n", (unsigned long long)st->cancelled);
    put(&o, "memra_sequences_total{result=\"failed\"} %llu\n", (unsigned long long)st->failed);
    metric(&o, "prefill_tokens_total", "counter", "Prompt tokens run through the model.");
    put(&o, "memra_prefill_tokens_total %llu\n", (unsigned long long)st->prefill_tokens);
    metric(&o, "prefill_seconds_total", "counter", "Seconds spent in prefill forwards.");
    put(&o, "memra_prefill_seconds_total %.6f\n", st->prefill_seconds);
    metric(&o, "decode_tokens_total", "counter", "Generated tokens run through the model.");
    put(&o, "memra_decode_tokens_total %llu\n", (unsigned long long)st->decode_tokens);
    metric(&o, "decode_seconds_total", "counter", "Seconds spent in decode steps.");
    put(&o, "memra_decode_seconds_total %.6f\n", st->decode_seconds);
    metric(&o, "prefill_tokens_per_second", "gauge", "Prefill rate: prefill tokens / prefill seconds.");
    put(&o, "memra_prefill_tokens_per_second %.3f\n",
        st->prefill_seconds > 0 ? (double)st->prefill_tokens / st->prefill_seconds : 0.0);
    metric(&o, "decode_tokens_per_second", "gauge", "Decode rate: decode tokens / decode seconds.");
    put(&o, "memra_decode_tokens_per_second %.3f\n",
        st->decode_seconds > 0 ? (double)st->decode_tokens / st->decode_seconds : 0.0);
    metric(&o, "batch_size", "histogram", "Items (sequences) per batched step (memra_forward_batch call).");
    uint64_t below = 0;
    for (int b = 0; b < SCHED_HIST_BUCKETS; b++) {
        below += st->step_hist[b];
        if (b < SCHED_HIST_BUCKETS - 1)
            put(&o, "memra_batch_size_bucket{le=\"%d\"} %llu\n", 1 << b, (unsigned long long)below);
        else
            put(&o, "memra_batch_size_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)below);
    }
    put(&o, "memra_batch_size_sum %llu\n", (unsigned long long)st->step_items);
    put(&o, "memra_batch_size_count %llu\n", (unsigned long long)st->steps);
    metric(&o, "batch_size_last", "gauge", "Items of the last batched step.");
    put(&o, "memra_batch_size_last %d\n", st->last_step_items);
    metric(&o, "batch_size_mean", "gauge", "Mean items per batched step: batch_size_sum / batch_size_count.");
    put(&o, "memra_batch_size_mean %.3f\n", st->steps ? (double)st->step_items / (double)st->steps : 0.0);
    metric(&o, "step_seconds_total", "counter", "Seconds spent in batched steps (prefill and decode).");
    put(&o, "memra_step_seconds_total %.6f\n", st->step_seconds);
    metric(&o, "steps_per_second", "gauge", "Step rate while in the model: batch_size_count / step_seconds_total.");
    put(&o, "memra_steps_per_second %.3f\n", st->step_seconds > 0 ? (double)st->steps / st->step_seconds : 0.0);
    return o.p;
}
