/* memra-server: GET /metrics in the Prometheus text format. */
#ifndef MEMRA_SERVER_METRICS_H
#define MEMRA_SERVER_METRICS_H

#include <stdint.h>

#include "scheduler.h"

/* Requests answered, by HTTP status. */
typedef struct metrics_status {
    int status;
    uint64_t count;
} metrics_status_t;

/* The exposition text (malloc'ed), NULL when out of memory. */
char *metrics_text(const sched_stats_t *st, const metrics_status_t *by_status, int n_status);

#endif
