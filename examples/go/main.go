// Greedy generation through cgo: loads a model (argument 1, else
// $MEMRA_DEFAULT_MODEL, else the bundled test/data/default.gguf), tokenizes a
// prompt, prefills it and decodes 8 greedy tokens.
//
//	PKG_CONFIG_PATH=build/meson-uninstalled LD_LIBRARY_PATH=build go run . [MODEL] [PROMPT]
package main

/*
#cgo pkg-config: memra
#include <stdlib.h>
#include <memra/memra.h>
#include <memra/tokenizer.h>
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"
)

func lastError() string { return C.GoString(C.memra_last_error()) }

func check(what string, st C.memra_status_t) {
	if st != C.MEMRA_OK {
		msg := lastError()
		if !strings.HasPrefix(msg, what+":") { // the library's messages mostly name the function already
			msg = what + ": " + msg
		}
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(1)
	}
}

func defaultModel() string {
	if p := os.Getenv("MEMRA_DEFAULT_MODEL"); p != "" {
		return p
	}
	wd, _ := os.Getwd()
	return filepath.Join(wd, "..", "..", "test", "data", "default.gguf")
}

func tokenize(tok *C.memra_tokenizer_t, text string) []int32 {
	ctext := C.CString(text)
	defer C.free(unsafe.Pointer(ctext))
	flags := C.uint32_t(C.MEMRA_TOKENIZE_ADD_SPECIAL | C.MEMRA_TOKENIZE_PARSE_SPECIAL)
	var n C.int32_t
	st := C.memra_tokenize(tok, ctext, C.size_t(len(text)), nil, 0, flags, &n)
	if st != C.MEMRA_OK && st != C.MEMRA_E_RANGE {
		check("memra_tokenize", st)
	}
	ids := make([]int32, int(n)+1)
	check("memra_tokenize", C.memra_tokenize(tok, ctext, C.size_t(len(text)),
		(*C.int32_t)(unsafe.Pointer(&ids[0])), n, flags, &n))
	return ids[:n]
}

func piece(tok *C.memra_tokenizer_t, id int32) string {
	buf := make([]byte, 256)
	var n C.size_t
	check("memra_token_to_piece", C.memra_token_to_piece(tok, C.int32_t(id),
		(*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), 0, &n))
	return string(buf[:n])
}

func main() {
	path := defaultModel()
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	prompt := "The quick brown fox"
	if len(os.Args) > 2 {
		prompt = os.Args[2]
	}
	const nGen = 8

	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var model *C.memra_model_t
	check("memra_model_load", C.memra_model_load(cpath, nil, &model))
	defer C.memra_model_free(model)
	tok := C.memra_model_tokenizer(model)
	if tok == nil {
		fmt.Fprintf(os.Stderr, "%s has no tokenizer\n", path)
		os.Exit(1)
	}
	var cache *C.memra_cache_t
	check("memra_cache_create", C.memra_cache_create(model, 0, &cache))
	defer C.memra_cache_free(cache)

	var sp C.memra_sampler_params_t
	C.memra_sampler_params_init(&sp, C.uint32_t(unsafe.Sizeof(sp)))
	sp.temperature = 0 // greedy
	var sampler *C.memra_sampler_t
	check("memra_sampler_create", C.memra_sampler_create(&sp, &sampler))
	defer C.memra_sampler_free(sampler)

	ids := tokenize(tok, prompt)
	fmt.Printf("memra %s, %s model %s: prompt %q -> %d tokens %v\n", C.GoString(C.memra_version()),
		C.GoString(C.memra_model_arch(model)), filepath.Base(path), prompt, len(ids), ids)

	nVocab := int(C.memra_model_n_vocab(model))
	logits := make([]float32, nVocab)
	lp := (*C.float)(unsafe.Pointer(&logits[0]))
	check("memra_forward", C.memra_forward(model, cache, (*C.int32_t)(unsafe.Pointer(&ids[0])),
		C.int32_t(len(ids)), 0, lp))
	var out []int32
	text := ""
	for i := 0; i < nGen; i++ {
		var t C.int32_t
		check("memra_sampler_sample", C.memra_sampler_sample(sampler, lp, C.int32_t(nVocab), &t))
		if C.memra_tokenizer_is_eog(tok, t) != 0 {
			break
		}
		check("memra_sampler_accept", C.memra_sampler_accept(sampler, t))
		out = append(out, int32(t))
		text += piece(tok, int32(t))
		check("memra_decode_step", C.memra_decode_step(model, cache, t, lp))
	}
	fmt.Printf("generated %d tokens: %v\n", len(out), out)
	fmt.Printf("text: %q\n", text)
	if len(out) == 0 {
		os.Exit(1)
	}
}
