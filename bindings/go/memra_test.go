package memra

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The bundled default model ($MEMRA_DEFAULT_MODEL, else test/data/default.gguf).
func modelPath(t *testing.T) string {
	if p := os.Getenv("MEMRA_DEFAULT_MODEL"); p != "" {
		return p
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(wd, "..", "..", "test", "data", "default.gguf")
}

func load(t *testing.T) (*Engine, *Model) {
	e, err := NewEngine("cpu", 2)
	if err != nil {
		t.Fatal(err)
	}
	m, err := LoadModel(modelPath(t), e)
	if err != nil {
		e.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	})
	return e, m
}

func TestVersionAndModel(t *testing.T) {
	if !strings.HasPrefix(Version(), "0.") {
		t.Fatalf("version %q", Version())
	}
	_, m := load(t)
	if m.Arch() == "" || m.NVocab() <= 0 || m.NLayers() <= 0 {
		t.Fatalf("arch %q vocab %d layers %d", m.Arch(), m.NVocab(), m.NLayers())
	}
}

func TestTokenizeRoundTrip(t *testing.T) {
	_, m := load(t)
	text := "Hello world, héllo"
	ids, err := m.Tokenize(text, false, false)
	if err != nil || len(ids) == 0 {
		t.Fatalf("tokenize: %v %v", ids, err)
	}
	back, err := m.Detokenize(ids)
	if err != nil || back != text {
		t.Fatalf("detokenize: %q %v", back, err)
	}
	if _, err := m.Detokenize([]int32{int32(m.NVocab())}); !errors.Is(err, ErrRange) {
		t.Fatalf("an id out of range: %v", err)
	}
}

func TestForwardDecodeMatchesPrefill(t *testing.T) {
	_, m := load(t)
	ids, err := m.Tokenize("The quick brown fox", true, false)
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.NewCache(64)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	full, err := m.Forward(c, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range full {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatal("non-finite logit")
		}
	}
	if c.Pos() != len(ids) {
		t.Fatalf("pos %d after %d tokens", c.Pos(), len(ids))
	}
	// the same tokens one decode step at a time: the CPU reference is bit-exact
	if err := c.Clear(); err != nil {
		t.Fatal(err)
	}
	logits := make([]float32, m.NVocab())
	for _, id := range ids {
		if err := m.DecodeStep(c, id, logits); err != nil {
			t.Fatal(err)
		}
	}
	for i := range logits {
		if logits[i] != full[i] {
			t.Fatalf("logit %d: decode %g, prefill %g", i, logits[i], full[i])
		}
	}
	if err := m.DecodeStep(c, int32(m.NVocab()), logits); err == nil {
		t.Fatal("a token out of range decoded")
	}
	if c.Pos() != len(ids) {
		t.Fatal("a failed step moved the cache")
	}
}

func TestGenerateAndChat(t *testing.T) {
	_, m := load(t)
	ids, err := m.Tokenize("Once upon a time", true, false)
	if err != nil {
		t.Fatal(err)
	}
	sp := DefaultSamplerParams()
	sp.Temperature = 0
	var text strings.Builder
	out, err := m.Generate(ids, 6, sp, func(p string) bool { text.WriteString(p); return true })
	if err != nil || len(out) == 0 || len(out) > 6 {
		t.Fatalf("generate: %v %v", out, err)
	}
	again, _ := m.Generate(ids, 6, sp, nil)
	if len(again) != len(out) {
		t.Fatal("greedy generation differs between runs")
	}
	for i := range out {
		if again[i] != out[i] {
			t.Fatal("greedy generation differs between runs")
		}
	}
	prompt, err := m.RenderChat(`{"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":true}`)
	if err != nil || !strings.HasSuffix(prompt, "assistant\n") {
		t.Fatalf("chat: %q %v", prompt, err)
	}
	if _, err := m.RenderChat(`{"messages": [`); err == nil {
		t.Fatal("malformed context JSON rendered")
	}
}

func TestErrors(t *testing.T) {
	_, err := LoadModel("/nonexistent/model.gguf", nil)
	var me *Error
	if !errors.As(err, &me) || me.Message == "" || !strings.Contains(me.Error(), "memra_model_load") {
		t.Fatalf("load of a missing file: %v", err)
	}
	if _, err := NewSampler(SamplerParams{Temperature: 1, TopP: 0, RepeatPenalty: 1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("top_p 0: %v", err)
	}
	e, m := load(t)
	c, err := m.NewCache(8)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); !errors.Is(err, ErrBusy) {
		t.Fatalf("model close with a live cache: %v", err)
	}
	c.Close()
	_ = e
}

func TestTypedCache(t *testing.T) {
	_, m := load(t)
	c, err := m.NewCacheTyped(16, KVQ8_0, KVF16)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if k, v := c.Types(); k != KVQ8_0 || v != KVF16 {
		t.Fatalf("types %d, %d", k, v)
	}
	f, err := m.NewCache(16)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if c.KVBytesPerToken() == 0 || c.KVBytesPerToken() >= f.KVBytesPerToken() {
		t.Fatalf("KV bytes per token: q8_0/f16 %d, f32 %d", c.KVBytesPerToken(), f.KVBytesPerToken())
	}
	if _, err := m.NewCacheTyped(16, 2 /* Q4_0 */, KVF16); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("a Q4_0 cache: %v", err)
	}
}

func TestCacheFork(t *testing.T) {
	_, m := load(t)
	p, err := m.NewCache(32)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := m.Forward(p, []int32{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	f, err := p.Fork(0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Pos() != p.Pos() {
		t.Fatalf("fork at %d, parent at %d", f.Pos(), p.Pos())
	}
	a := make([]float32, m.NVocab())
	b := make([]float32, m.NVocab())
	if err := m.DecodeStep(f, 7, a); err != nil {
		t.Fatal(err)
	}
	if err := m.DecodeStep(p, 7, b); err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("logit %d: fork %g, parent %g", i, a[i], b[i])
		}
	}
	if _, err := p.Fork(2); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a fork below the parent's position: %v", err)
	}
}
