"""Minimal ctypes binding for libmemra (standard library only).

The library is found through $MEMRA_LIB (the .so file or its folder), else a
build folder of this source tree (build/, build-*/), else the system loader
(ctypes.util.find_library). The bundled default model is $MEMRA_DEFAULT_MODEL,
else test/data/default.gguf of this source tree.

    with Model(default_model_path()) as m:
        ids = m.tokenize("The quick brown fox")
        with m.cache() as c:
            logits = m.forward(c, ids)
"""

import ctypes
import ctypes.util
import glob
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))

TOKENIZE_ADD_SPECIAL = 1 << 0
TOKENIZE_PARSE_SPECIAL = 1 << 1
E_RANGE = -9


class MemraError(RuntimeError):
    """A libmemra call failed; the message is the library's."""

    def __init__(self, func, status, message):
        # the library's messages mostly name the function already
        text = message if message.startswith(func + ":") else "%s: %s" % (func, message)
        super().__init__("%s (status %d)" % (text, status))
        self.func = func
        self.status = status


def _find_library():
    env = os.environ.get("MEMRA_LIB")
    if env:
        return os.path.join(env, "libmemra.so") if os.path.isdir(env) else env
    for d in [os.path.join(_ROOT, "build")] + sorted(glob.glob(os.path.join(_ROOT, "build-*"))):
        p = os.path.join(d, "libmemra.so")
        if os.path.exists(p):
            return p
    found = ctypes.util.find_library("memra")
    if not found:
        raise OSError("libmemra.so not found: set MEMRA_LIB to the library (or its folder)")
    return found


def default_model_path():
    return os.environ.get("MEMRA_DEFAULT_MODEL") or os.path.join(_ROOT, "test", "data", "default.gguf")


class SamplerParams(ctypes.Structure):
    """memra_sampler_params_t (include/memra/sampler.h)."""

    _fields_ = [
        ("size", ctypes.c_uint32),
        ("temperature", ctypes.c_float),
        ("top_k", ctypes.c_int32),
        ("top_p", ctypes.c_float),
        ("min_p", ctypes.c_float),
        ("repeat_penalty", ctypes.c_float),
        ("repeat_last_n", ctypes.c_int32),
        ("seed", ctypes.c_uint64),
    ]


_lib = ctypes.CDLL(_find_library())
_P = ctypes.c_void_p
_I32P = ctypes.POINTER(ctypes.c_int32)
_FP = ctypes.POINTER(ctypes.c_float)


def _fn(name, restype, *argtypes):
    f = getattr(_lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_last_error = _fn("memra_last_error", ctypes.c_char_p)
_version = _fn("memra_version", ctypes.c_char_p)
_model_load = _fn("memra_model_load", ctypes.c_int, ctypes.c_char_p, _P, ctypes.POINTER(_P))
_model_free = _fn("memra_model_free", ctypes.c_int, _P)
_model_n_vocab = _fn("memra_model_n_vocab", ctypes.c_int32, _P)
_model_arch = _fn("memra_model_arch", ctypes.c_char_p, _P)
_model_tokenizer = _fn("memra_model_tokenizer", _P, _P)
_model_last_error = _fn("memra_model_last_error", ctypes.c_char_p, _P)
_cache_create = _fn("memra_cache_create", ctypes.c_int, _P, ctypes.c_int32, ctypes.POINTER(_P))
_cache_free = _fn("memra_cache_free", ctypes.c_int, _P)
_forward = _fn("memra_forward", ctypes.c_int, _P, _P, _I32P, ctypes.c_int32, ctypes.c_uint32, _FP)
_decode_step = _fn("memra_decode_step", ctypes.c_int, _P, _P, ctypes.c_int32, _FP)
_tokenize = _fn("memra_tokenize", ctypes.c_int, _P, ctypes.c_char_p, ctypes.c_size_t, _I32P, ctypes.c_int32,
                ctypes.c_uint32, _I32P)
_token_to_piece = _fn("memra_token_to_piece", ctypes.c_int, _P, ctypes.c_int32, ctypes.c_char_p, ctypes.c_size_t,
                      ctypes.c_uint32, ctypes.POINTER(ctypes.c_size_t))
_is_eog = _fn("memra_tokenizer_is_eog", ctypes.c_int, _P, ctypes.c_int32)
_sampler_params_init = _fn("memra_sampler_params_init", None, ctypes.POINTER(SamplerParams), ctypes.c_uint32)
_sampler_create = _fn("memra_sampler_create", ctypes.c_int, ctypes.POINTER(SamplerParams), ctypes.POINTER(_P))
_sampler_free = _fn("memra_sampler_free", None, _P)
_sampler_accept = _fn("memra_sampler_accept", ctypes.c_int, _P, ctypes.c_int32)
_sampler_sample = _fn("memra_sampler_sample", ctypes.c_int, _P, _FP, ctypes.c_int32, _I32P)


def version():
    return _version().decode()


def _check(func, status, message=None):
    if status != 0:
        msg = message() if message else _last_error()
        raise MemraError(func, status, (msg or b"").decode(errors="replace"))


class Cache:
    def __init__(self, model, n_ctx=0):
        self._model = model
        self._h = _P()
        _check("memra_cache_create", _cache_create(model._h, n_ctx, ctypes.byref(self._h)))

    def close(self):
        if self._h:
            _cache_free(self._h)
            self._h = _P()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Model:
    def __init__(self, path):
        self._h = _P()
        _check("memra_model_load", _model_load(os.fsencode(path), None, ctypes.byref(self._h)))
        self.n_vocab = _model_n_vocab(self._h)
        self.arch = _model_arch(self._h).decode()
        self._tok = _model_tokenizer(self._h)
        if not self._tok:
            self.close()
            raise MemraError("memra_model_tokenizer", -12, "%s has no tokenizer" % path)

    def close(self):
        if self._h:
            _model_free(self._h)
            self._h = _P()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def cache(self, n_ctx=0):
        return Cache(self, n_ctx)

    def _err(self):
        return _model_last_error(self._h)

    def tokenize(self, text, flags=TOKENIZE_ADD_SPECIAL | TOKENIZE_PARSE_SPECIAL):
        data = text.encode()
        n = ctypes.c_int32(0)
        st = _tokenize(self._tok, data, len(data), None, 0, flags, ctypes.byref(n))
        if st not in (0, E_RANGE):
            _check("memra_tokenize", st)
        ids = (ctypes.c_int32 * max(n.value, 1))()
        _check("memra_tokenize", _tokenize(self._tok, data, len(data), ids, n.value, flags, ctypes.byref(n)))
        return list(ids[: n.value])

    def piece(self, token):
        """The bytes of one token (control tokens give b"")."""
        n = ctypes.c_size_t(0)
        buf = ctypes.create_string_buffer(64)
        st = _token_to_piece(self._tok, token, buf, len(buf), 0, ctypes.byref(n))
        if st == E_RANGE and n.value > len(buf):
            buf = ctypes.create_string_buffer(n.value)
            st = _token_to_piece(self._tok, token, buf, len(buf), 0, ctypes.byref(n))
        _check("memra_token_to_piece", st)
        return buf.raw[: n.value]

    def is_eog(self, token):
        return bool(_is_eog(self._tok, token))

    def forward(self, cache, tokens):
        """Runs TOKENS at the cache position; returns the last row of logits."""
        ids = (ctypes.c_int32 * len(tokens))(*tokens)
        out = (ctypes.c_float * self.n_vocab)()
        _check("memra_forward", _forward(self._h, cache._h, ids, len(tokens), 0, out), self._err)
        return out

    def decode(self, cache, token):
        out = (ctypes.c_float * self.n_vocab)()
        _check("memra_decode_step", _decode_step(self._h, cache._h, token, out), self._err)
        return out


class Sampler:
    def __init__(self, temperature=0.8, seed=None, **kw):
        p = SamplerParams()
        _sampler_params_init(ctypes.byref(p), ctypes.sizeof(p))
        p.temperature = temperature
        if seed is not None:
            p.seed = seed
        for k, v in kw.items():
            setattr(p, k, v)
        self._h = _P()
        _check("memra_sampler_create", _sampler_create(ctypes.byref(p), ctypes.byref(self._h)))

    def close(self):
        if self._h:
            _sampler_free(self._h)
            self._h = _P()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def accept(self, token):
        _check("memra_sampler_accept", _sampler_accept(self._h, token))

    def sample(self, logits):
        t = ctypes.c_int32(-1)
        _check("memra_sampler_sample", _sampler_sample(self._h, logits, len(logits), ctypes.byref(t)))
        return t.value
