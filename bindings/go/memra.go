// Package memra binds libmemra (include/memra/*.h) through cgo: engines,
// models, caches, samplers, tokenization, chat templates and generation.
//
// The library is found with pkg-config (`#cgo pkg-config: memra`): install
// it, or point PKG_CONFIG_PATH at a build's meson-uninstalled folder and
// LD_LIBRARY_PATH at the build. Handles follow the C rules: one goroutine at
// a time per model (a second concurrent call gets ErrBusy), distinct models
// are independent, and Close frees a handle (safe to call twice). Errors
// are *Error values carrying the library's status and message.
package memra

/*
#cgo pkg-config: memra
#include <stdlib.h>
#include <memra/memra.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// Status is a memra_status_t.
type Status int

// Error is a failed call: the function, its status and the library's message.
type Error struct {
	Func    string
	Status  Status
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (%s)", e.Func, e.Message, C.GoString(C.memra_strerror(C.memra_status_t(e.Status))))
}

// Is matches errors.Is(err, ErrBusy) and the other status sentinels.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Func == "" && t.Status == e.Status
}

// Sentinels for errors.Is.
var (
	ErrInvalid     = &Error{Status: Status(C.MEMRA_E_INVALID)}
	ErrRange       = &Error{Status: Status(C.MEMRA_E_RANGE)}
	ErrBusy        = &Error{Status: Status(C.MEMRA_E_BUSY)}
	ErrIO          = &Error{Status: Status(C.MEMRA_E_IO)}
	ErrFormat      = &Error{Status: Status(C.MEMRA_E_FORMAT)}
	ErrNotFound    = &Error{Status: Status(C.MEMRA_E_NOT_FOUND)}
	ErrUnsupported = &Error{Status: Status(C.MEMRA_E_UNSUPPORTED)}
)

func check(fn string, st C.memra_status_t) error {
	if st == C.MEMRA_OK {
		return nil
	}
	return &Error{Func: fn, Status: Status(st), Message: C.GoString(C.memra_last_error())}
}

// Version is memra_version().
func Version() string { return C.GoString(C.memra_version()) }

// Engine is a memra_engine_t: a backend on one device.
type Engine struct{ h *C.memra_engine_t }

// NewEngine creates an engine on DEVICE ("cpu", "cuda", "cuda:N"; "" = cpu)
// with THREADS CPU threads (0 = all cores).
func NewEngine(device string, threads int) (*Engine, error) {
	var p C.memra_engine_params_t
	C.memra_engine_params_init(&p, C.uint32_t(unsafe.Sizeof(p)))
	p.n_threads = C.int32_t(threads)
	if device != "" {
		cd := C.CString(device)
		defer C.free(unsafe.Pointer(cd))
		if err := check("memra_engine_params_set_device", C.memra_engine_params_set_device(&p, cd)); err != nil {
			return nil, err
		}
	}
	e := &Engine{}
	if err := check("memra_engine_create", C.memra_engine_create(&p, &e.h)); err != nil {
		return nil, err
	}
	return e, nil
}

// Close destroys the engine (after every model on it is closed).
func (e *Engine) Close() error {
	if e == nil || e.h == nil {
		return nil
	}
	if err := check("memra_engine_destroy", C.memra_engine_destroy(e.h)); err != nil {
		return err
	}
	e.h = nil
	return nil
}

// Model is a memra_model_t with its tokenizer.
type Model struct {
	h   *C.memra_model_t
	tok *C.memra_tokenizer_t
}

// LoadModel loads the GGUF at PATH onto ENGINE (nil: a CPU engine of the
// library's own).
func LoadModel(path string, engine *Engine) (*Model, error) {
	var p C.memra_model_params_t
	C.memra_model_params_init(&p, C.uint32_t(unsafe.Sizeof(p)))
	if engine != nil {
		p.engine = engine.h
	}
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	m := &Model{}
	if err := check("memra_model_load", C.memra_model_load(cp, &p, &m.h)); err != nil {
		return nil, err
	}
	m.tok = C.memra_model_tokenizer(m.h)
	return m, nil
}

// Close frees the model (its caches must be closed first: ErrBusy).
func (m *Model) Close() error {
	if m == nil || m.h == nil {
		return nil
	}
	if err := check("memra_model_free", C.memra_model_free(m.h)); err != nil {
		return err
	}
	m.h, m.tok = nil, nil
	return nil
}

// Arch is the GGUF's general.architecture.
func (m *Model) Arch() string { return C.GoString(C.memra_model_arch(m.h)) }

// NVocab is the vocabulary size (the length of a logits row).
func (m *Model) NVocab() int { return int(C.memra_model_n_vocab(m.h)) }

// NLayers is the number of layers.
func (m *Model) NLayers() int { return int(C.memra_model_n_layers(m.h)) }

func (m *Model) fail(fn string, st C.memra_status_t) error {
	if st == C.MEMRA_OK {
		return nil
	}
	return &Error{Func: fn, Status: Status(st), Message: C.GoString(C.memra_model_last_error(m.h))}
}

// Tokenize turns TEXT into token ids (ADDSPECIAL: BOS as the model says;
// PARSESPECIAL: special-token texts become their ids).
func (m *Model) Tokenize(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	if m.tok == nil {
		return nil, &Error{Func: "memra_tokenize", Status: Status(C.MEMRA_E_NOT_FOUND), Message: "the model has no tokenizer"}
	}
	var flags C.uint32_t
	if addSpecial {
		flags |= C.MEMRA_TOKENIZE_ADD_SPECIAL
	}
	if parseSpecial {
		flags |= C.MEMRA_TOKENIZE_PARSE_SPECIAL
	}
	ct := C.CString(text)
	defer C.free(unsafe.Pointer(ct))
	var n C.int32_t
	st := C.memra_tokenize(m.tok, ct, C.size_t(len(text)), nil, 0, flags, &n)
	if st != C.MEMRA_OK && st != C.MEMRA_E_RANGE {
		return nil, check("memra_tokenize", st)
	}
	ids := make([]int32, int(n)+1)
	if err := check("memra_tokenize", C.memra_tokenize(m.tok, ct, C.size_t(len(text)),
		(*C.int32_t)(unsafe.Pointer(&ids[0])), n, flags, &n)); err != nil {
		return nil, err
	}
	return ids[:n], nil
}

// Detokenize turns IDS back into text.
func (m *Model) Detokenize(ids []int32) (string, error) {
	if len(ids) == 0 {
		return "", nil
	}
	var n C.size_t
	p := (*C.int32_t)(unsafe.Pointer(&ids[0]))
	st := C.memra_detokenize(m.tok, p, C.int32_t(len(ids)), nil, 0, 0, &n)
	if st != C.MEMRA_OK && st != C.MEMRA_E_RANGE {
		return "", check("memra_detokenize", st)
	}
	buf := make([]byte, int(n)+1)
	if err := check("memra_detokenize", C.memra_detokenize(m.tok, p, C.int32_t(len(ids)),
		(*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), 0, &n)); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// Piece is the text of one token (special tokens give their text when SPECIAL).
func (m *Model) Piece(id int32, special bool) (string, error) {
	var flags C.uint32_t
	if special {
		flags = C.MEMRA_PIECE_SPECIAL
	}
	buf := make([]byte, 256)
	var n C.size_t
	st := C.memra_token_to_piece(m.tok, C.int32_t(id), (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), flags, &n)
	if st == C.MEMRA_E_RANGE && int(n) > len(buf) {
		buf = make([]byte, int(n))
		st = C.memra_token_to_piece(m.tok, C.int32_t(id), (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), flags, &n)
	}
	if err := check("memra_token_to_piece", st); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// IsEOG says whether ID ends generation.
func (m *Model) IsEOG(id int32) bool { return C.memra_tokenizer_is_eog(m.tok, C.int32_t(id)) != 0 }

// RenderChat renders the model's chat template (docs/CHAT.md) for
// CONTEXTJSON, one JSON object: messages, add_generation_prompt, tools, ...
func (m *Model) RenderChat(contextJSON string) (string, error) {
	var p C.memra_chat_params_t
	C.memra_chat_params_init(&p, C.uint32_t(unsafe.Sizeof(p)))
	cc := C.CString(contextJSON)
	defer C.free(unsafe.Pointer(cc))
	var out *C.char
	var n C.size_t
	if err := check("memra_chat_render_tokenizer", C.memra_chat_render_tokenizer(m.tok, cc, &p, &out, &n)); err != nil {
		return "", err
	}
	defer C.memra_free(unsafe.Pointer(out))
	return C.GoStringN(out, C.int(n)), nil
}

// Cache is a memra_cache_t: one sequence's KV rows and recurrent state.
type Cache struct {
	h *C.memra_cache_t
	m *Model
}

// NewCache creates a cache of NCTX tokens (0 = the model's default) for M.
func (m *Model) NewCache(nCtx int) (*Cache, error) {
	c := &Cache{m: m}
	if err := m.fail("memra_cache_create", C.memra_cache_create(m.h, C.int32_t(nCtx), &c.h)); err != nil {
		return nil, err
	}
	return c, nil
}

// KV cache storage types (memra_type_t ids; memra_cache_params_t in model.h).
const (
	KVF32  = int(C.MEMRA_TYPE_F32)
	KVF16  = int(C.MEMRA_TYPE_F16)
	KVBF16 = int(C.MEMRA_TYPE_BF16)
	KVQ8_0 = int(C.MEMRA_TYPE_Q8_0)
)

// NewCacheTyped creates a cache of NCTX tokens whose K and V rows are
// stored as TYPEK and TYPEV (KVF32, KVF16, KVBF16 or KVQ8_0):
// memra_cache_create_ex.
func (m *Model) NewCacheTyped(nCtx, typeK, typeV int) (*Cache, error) {
	var p C.memra_cache_params_t
	C.memra_cache_params_init(&p, C.uint32_t(unsafe.Sizeof(p)))
	p.n_ctx = C.int32_t(nCtx)
	p.type_k = C.memra_type_t(typeK)
	p.type_v = C.memra_type_t(typeV)
	c := &Cache{m: m}
	if err := m.fail("memra_cache_create_ex", C.memra_cache_create_ex(m.h, &p, &c.h)); err != nil {
		return nil, err
	}
	return c, nil
}

// Types are the storage types of the cache's K and V rows.
func (c *Cache) Types() (k, v int) {
	return int(C.memra_cache_type_k(c.h)), int(C.memra_cache_type_v(c.h))
}

// KVBytesPerToken is the bytes of KV rows one token takes, all layers together.
func (c *Cache) KVBytesPerToken() uint64 { return uint64(C.memra_cache_kv_bytes_per_token(c.h)) }

// StateBytes is the bytes of recurrent state the cache holds, whatever its capacity.
func (c *Cache) StateBytes() uint64 { return uint64(C.memra_cache_state_bytes(c.h)) }

// Fork creates a new cache holding a copy of C's KV rows and recurrent
// state at its position (memra_cache_fork); NCTX is its capacity, 0 = C's.
// For hybrid models the fork point is C's current position.
func (c *Cache) Fork(nCtx int) (*Cache, error) {
	f := &Cache{m: c.m}
	if err := c.m.fail("memra_cache_fork", C.memra_cache_fork(c.h, C.int32_t(nCtx), &f.h)); err != nil {
		return nil, err
	}
	return f, nil
}

// Close frees the cache.
func (c *Cache) Close() error {
	if c == nil || c.h == nil {
		return nil
	}
	if err := check("memra_cache_free", C.memra_cache_free(c.h)); err != nil {
		return err
	}
	c.h = nil
	return nil
}

// Pos is the number of tokens in the cache.
func (c *Cache) Pos() int { return int(C.memra_cache_pos(c.h)) }

// Clear empties the cache.
func (c *Cache) Clear() error { return check("memra_cache_clear", C.memra_cache_clear(c.h)) }

// Forward prefills IDS into CACHE and returns the last row's logits.
func (m *Model) Forward(c *Cache, ids []int32) ([]float32, error) {
	if len(ids) == 0 {
		return nil, &Error{Func: "memra_forward", Status: Status(C.MEMRA_E_INVALID), Message: "no tokens"}
	}
	logits := make([]float32, m.NVocab())
	err := m.fail("memra_forward", C.memra_forward(m.h, c.h, (*C.int32_t)(unsafe.Pointer(&ids[0])),
		C.int32_t(len(ids)), 0, (*C.float)(unsafe.Pointer(&logits[0]))))
	if err != nil {
		return nil, err
	}
	return logits, nil
}

// DecodeStep runs one token and writes its logits into LOGITS (len NVocab).
func (m *Model) DecodeStep(c *Cache, id int32, logits []float32) error {
	if len(logits) < m.NVocab() {
		return &Error{Func: "memra_decode_step", Status: Status(C.MEMRA_E_INVALID), Message: "logits shorter than n_vocab"}
	}
	return m.fail("memra_decode_step", C.memra_decode_step(m.h, c.h, C.int32_t(id), (*C.float)(unsafe.Pointer(&logits[0]))))
}

// SamplerParams are memra_sampler_params_t's fields.
type SamplerParams struct {
	Temperature   float32 // 0 = greedy
	TopK          int32
	TopP, MinP    float32
	RepeatPenalty float32
	RepeatLastN   int32
	Seed          uint64
}

// DefaultSamplerParams are the library's defaults.
func DefaultSamplerParams() SamplerParams {
	var p C.memra_sampler_params_t
	C.memra_sampler_params_init(&p, C.uint32_t(unsafe.Sizeof(p)))
	return SamplerParams{float32(p.temperature), int32(p.top_k), float32(p.top_p), float32(p.min_p),
		float32(p.repeat_penalty), int32(p.repeat_last_n), uint64(p.seed)}
}

// Sampler is a memra_sampler_t.
type Sampler struct{ h *C.memra_sampler_t }

// NewSampler creates a sampler (out-of-range parameters: ErrInvalid).
func NewSampler(sp SamplerParams) (*Sampler, error) {
	var p C.memra_sampler_params_t
	C.memra_sampler_params_init(&p, C.uint32_t(unsafe.Sizeof(p)))
	p.temperature, p.top_k, p.top_p, p.min_p = C.float(sp.Temperature), C.int32_t(sp.TopK), C.float(sp.TopP), C.float(sp.MinP)
	p.repeat_penalty, p.repeat_last_n, p.seed = C.float(sp.RepeatPenalty), C.int32_t(sp.RepeatLastN), C.uint64_t(sp.Seed)
	s := &Sampler{}
	if err := check("memra_sampler_create", C.memra_sampler_create(&p, &s.h)); err != nil {
		return nil, err
	}
	return s, nil
}

// Close frees the sampler.
func (s *Sampler) Close() {
	if s != nil && s.h != nil {
		C.memra_sampler_free(s.h)
		s.h = nil
	}
}

// Sample draws a token from LOGITS.
func (s *Sampler) Sample(logits []float32) (int32, error) {
	var t C.int32_t
	st := C.memra_sampler_sample(s.h, (*C.float)(unsafe.Pointer(&logits[0])), C.int32_t(len(logits)), &t)
	if st != C.MEMRA_OK {
		return 0, &Error{Func: "memra_sampler_sample", Status: Status(st), Message: C.GoString(C.memra_sampler_last_error(s.h))}
	}
	return int32(t), nil
}

// Accept records ID in the repetition history.
func (s *Sampler) Accept(id int32) error {
	return check("memra_sampler_accept", C.memra_sampler_accept(s.h, C.int32_t(id)))
}

// Generate prefills PROMPT's ids into a fresh cache and calls EMIT with the
// text of each sampled token, up to MAXTOKENS or an end-of-generation
// token; it returns the sampled ids. EMIT may return false to stop.
func (m *Model) Generate(prompt []int32, maxTokens int, sp SamplerParams, emit func(string) bool) ([]int32, error) {
	c, err := m.NewCache(len(prompt) + maxTokens + 1)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	s, err := NewSampler(sp)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	for _, t := range prompt {
		if err := s.Accept(t); err != nil {
			return nil, err
		}
	}
	logits, err := m.Forward(c, prompt)
	if err != nil {
		return nil, err
	}
	var out []int32
	for i := 0; i < maxTokens; i++ {
		t, err := s.Sample(logits)
		if err != nil {
			return out, err
		}
		if m.IsEOG(t) {
			break
		}
		if err := s.Accept(t); err != nil {
			return out, err
		}
		out = append(out, t)
		if emit != nil {
			piece, err := m.Piece(t, false)
			if err != nil {
				return out, err
			}
			if !emit(piece) {
				break
			}
		}
		if i+1 < maxTokens {
			if err := m.DecodeStep(c, t, logits); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}
