/* memra: exported checks. Each fills a caller-owned report struct, returns a
 * status and prints nothing; the programs in probes/ parse arguments and
 * print the reports. Thread-safety: any thread (each call uses its own
 * engines and models). */
#ifndef MEMRA_CHECK_H
#define MEMRA_CHECK_H

#include "common.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- kernel check (CUDA ops vs the CPU reference) ---------------------- */

/* ---- pipeline parity ---------------------------------------------------- */

/* ---- argmax margin ------------------------------------------------------ */

#ifdef __cplusplus
}
#endif
#endif
