/* memra: the whole public API. Include this one header.
 *
 * Conventions: functions return memra_status_t (MEMRA_OK = 0, negative
 * errors); constructors write the handle through an out pointer; destroy
 * functions accept NULL; params structs start with their own size; nothing
 * aborts, exits or prints unless a log callback is installed. Each function
 * states its thread safety. */
#ifndef MEMRA_MEMRA_H
#define MEMRA_MEMRA_H

#include "common.h"
#include "engine.h"
#include "gguf.h"
#include "model.h"
#include "pipeline.h"
#include "sampler.h"
#include "tokenizer.h"
#include "check.h"
#include "chat.h"

#endif
