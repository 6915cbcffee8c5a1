"""Handles of the public API: engines, models, caches, snapshots, deferred
steps, samplers and tokenizers, each a context manager that frees its handle."""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import enum
import os
from typing import TYPE_CHECKING, Any, Callable, Generator, List, Optional, Sequence, Tuple, Union

from . import _arrays, _capi
from ._capi import lib
from ._errors import MemraError, NotFoundError, Status, check, error, misuse

if TYPE_CHECKING:
    from ._gguf import Gguf

PathLike = Union[str, "os.PathLike[str]"]


def _s(b: Optional[bytes]) -> str:
    return b.decode(errors="replace") if b else ""


def _path(p: PathLike) -> bytes:
    return os.fsencode(p)


class Backend(enum.IntEnum):
    """memra_backend_t."""

    CPU = 0
    CUDA = 1


class LayerKind(enum.IntEnum):
    """memra_layer_kind_t."""

    ATTENTION = 0
    SLIDING = 1
    RECURRENT = 2


class SpecialToken(enum.IntEnum):
    """memra_special_token_t: roles for Tokenizer.special()."""

    BOS = 0
    EOS = 1
    EOT = 2
    EOM = 3
    UNK = 4
    SEP = 5
    PAD = 6
    MASK = 7
    NL = 8
    FIM_PRE = 9
    FIM_SUF = 10
    FIM_MID = 11
    FIM_PAD = 12
    FIM_REP = 13
    FIM_SEP = 14


# ---- params with their size field (the MEMRA_*_default_params macros) ----------


def engine_default_params() -> _capi.EngineParams:
    """memra_engine_default_params: defaults, size field set."""
    p = _capi.EngineParams()
    lib().memra_engine_params_init(ctypes.byref(p), ctypes.sizeof(p))
    return p


def model_default_params() -> _capi.ModelParams:
    """memra_model_default_params: defaults, size field set."""
    p = _capi.ModelParams()
    lib().memra_model_params_init(ctypes.byref(p), ctypes.sizeof(p))
    return p


def cache_default_params() -> _capi.CacheParams:
    """memra_cache_default_params: defaults (f16 K and V), size field set."""
    p = _capi.CacheParams()
    lib().memra_cache_params_init(ctypes.byref(p), ctypes.sizeof(p))
    return p


def sampler_default_params() -> _capi.SamplerParams:
    """memra_sampler_default_params: defaults, size field set."""
    p = _capi.SamplerParams()
    lib().memra_sampler_params_init(ctypes.byref(p), ctypes.sizeof(p))
    return p


class _Handle:
    """An owned (or borrowed) pointer to a library object."""

    _kind = "handle"

    def __init__(self) -> None:
        self._ptr: Optional[int] = None
        self._owner: Optional[_Handle] = None  # set for borrowed handles

    @property
    def closed(self) -> bool:
        return self._ptr is None or (self._owner is not None and self._owner.closed)

    @property
    def handle(self) -> int:
        """The raw C pointer (for the low-level functions in memra.capi)."""
        if self._ptr is None:
            raise misuse("memra", "%s is closed" % self._kind)
        if self._owner is not None and self._owner.closed:
            raise misuse("memra", "%s belongs to a closed %s" % (self._kind, self._owner._kind))
        return self._ptr

    def _release(self, ptr: int) -> int:  # pragma: no cover - overridden
        return 0

    def close(self) -> None:
        """Frees the handle (a no-op when closed or borrowed). Raises, keeping
        the handle open, when the library refuses (BusyError: dependants alive)."""
        if self._ptr is None:
            return
        if self._owner is not None:
            self._ptr = None
            return
        st = self._release(self._ptr)
        if st != 0:
            raise error(st, None, "close %s" % self._kind)
        self._ptr = None

    def __enter__(self):  # type: ignore[no-untyped-def]
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


# ---- engine -----------------------------------------------------------------------


class HostBuffer(_Handle):
    """Host memory of memra_engine_host_alloc (page-locked on CUDA engines) holding
    N float32 values; pass ``buf.array`` as ``out=`` to Model.forward/decode.
    Views of it die with close()."""

    _kind = "host buffer"

    def __init__(self, engine: "Engine", n_floats: int) -> None:
        super().__init__()
        if n_floats <= 0:
            raise error(Status.E_INVALID, "memra_engine_host_alloc: %d floats" % n_floats, "memra_engine_host_alloc")
        p = lib().memra_engine_host_alloc(engine.handle, 4 * n_floats)
        if not p:
            raise error(Status.E_NOMEM, "memra_engine_host_alloc: %d bytes: out of memory" % (4 * n_floats))
        self._ptr = int(p)
        self.n = n_floats
        self.array = _arrays.floats_at(self._ptr, n_floats)

    def _release(self, ptr: int) -> int:
        lib().memra_host_free(ptr)
        return 0


class Engine(_Handle):
    """memra_engine_t: one backend on one device ("cpu", "cuda", "cuda:N")."""

    _kind = "engine"

    def __init__(
        self,
        device: str = "cpu",
        *,
        n_threads: int = 0,
        fast: int = -1,
        params: Optional[_capi.EngineParams] = None,
    ) -> None:
        super().__init__()
        if params is None:
            params = engine_default_params()
            check(lib().memra_engine_params_set_device(ctypes.byref(params), device.encode()),
                  "memra_engine_params_set_device")
            params.n_threads = n_threads
            params.fast = fast
        h = ctypes.c_void_p()
        check(lib().memra_engine_create(ctypes.byref(params), ctypes.byref(h)), "memra_engine_create")
        self._ptr = h.value

    def _release(self, ptr: int) -> int:
        return int(lib().memra_engine_destroy(ptr))

    def info(self) -> _capi.EngineInfo:
        """memra_engine_get_info (backend_name/device_name are bytes)."""
        info = _capi.EngineInfo()
        info.size = ctypes.sizeof(info)
        check(lib().memra_engine_get_info(self.handle, ctypes.byref(info)), "memra_engine_get_info")
        return info

    @property
    def backend(self) -> Backend:
        return Backend(self.info().backend)

    @property
    def device_name(self) -> str:
        return _s(self.info().device_name)

    def copy_bandwidth(self, nbytes: int = 64 << 20, reps: int = 5) -> float:
        """memra_engine_copy_bandwidth: median device copy rate, bytes/s."""
        out = ctypes.c_double()
        check(lib().memra_engine_copy_bandwidth(self.handle, nbytes, reps, ctypes.byref(out)),
              "memra_engine_copy_bandwidth")
        return out.value

    def host_alloc(self, n_floats: int) -> HostBuffer:
        """memra_engine_host_alloc of N_FLOATS float32 values (freed by close())."""
        return HostBuffer(self, n_floats)

    @property
    def last_error(self) -> str:
        """memra_engine_last_error."""
        return _s(lib().memra_engine_last_error(self.handle))


# ---- sampler ------------------------------------------------------------------------


class Sampler(_Handle):
    """memra_sampler_t. Parameters left as None take the library's defaults
    (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_penalty 1.0,
    repeat_last_n 64); temperature <= 0 is greedy."""

    _kind = "sampler"

    def __init__(
        self,
        temperature: Optional[float] = None,
        top_k: Optional[int] = None,
        top_p: Optional[float] = None,
        min_p: Optional[float] = None,
        repeat_penalty: Optional[float] = None,
        repeat_last_n: Optional[int] = None,
        seed: Optional[int] = None,
        *,
        params: Optional[_capi.SamplerParams] = None,
    ) -> None:
        super().__init__()
        p = params if params is not None else sampler_default_params()
        for name, value in (
            ("temperature", temperature),
            ("top_k", top_k),
            ("top_p", top_p),
            ("min_p", min_p),
            ("repeat_penalty", repeat_penalty),
            ("repeat_last_n", repeat_last_n),
            ("seed", seed),
        ):
            if value is not None:
                setattr(p, name, value)
        h = ctypes.c_void_p()
        check(lib().memra_sampler_create(ctypes.byref(p), ctypes.byref(h)), "memra_sampler_create")
        self._ptr = h.value

    def _release(self, ptr: int) -> int:
        lib().memra_sampler_free(ptr)
        return 0

    def reset(self) -> None:
        """memra_sampler_reset: forgets accepted tokens, restarts the PRNG."""
        lib().memra_sampler_reset(self.handle)

    def accept(self, token: int) -> None:
        """memra_sampler_accept: records TOKEN for the repetition penalty."""
        check(lib().memra_sampler_accept(self.handle, _arrays.int32s([token])[0]), "memra_sampler_accept")

    def sample(self, logits: Any) -> int:
        """memra_sampler_sample over one row of logits (numpy array, array.array,
        any float32 buffer, or a sequence of floats)."""
        ptr, n, _keep = _arrays.in_floats(logits)
        tok = ctypes.c_int32(-1)
        check(lib().memra_sampler_sample(self.handle, ptr, n, ctypes.byref(tok)), "memra_sampler_sample")
        return tok.value

    @property
    def last_error(self) -> str:
        """memra_sampler_last_error."""
        return _s(lib().memra_sampler_last_error(self.handle))


# ---- tokenizer ----------------------------------------------------------------------


class Tokenizer(_Handle):
    """memra_tokenizer_t: Tokenizer(path) builds one from a GGUF file (owned);
    Model.tokenizer and Tokenizer.from_gguf give the others."""

    _kind = "tokenizer"

    def __init__(self, path: Optional[PathLike] = None) -> None:
        super().__init__()
        if path is not None:
            h = ctypes.c_void_p()
            check(lib().memra_tokenizer_load(_path(path), ctypes.byref(h)), "memra_tokenizer_load")
            self._ptr = h.value

    @classmethod
    def from_gguf(cls, gguf: "Gguf") -> "Tokenizer":
        """memra_tokenizer_from_gguf: an owned tokenizer (the file may be closed after)."""
        t = cls()
        h = ctypes.c_void_p()
        check(lib().memra_tokenizer_from_gguf(gguf.handle, ctypes.byref(h)), "memra_tokenizer_from_gguf")
        t._ptr = h.value
        return t

    @classmethod
    def _borrow(cls, ptr: int, owner: _Handle) -> "Tokenizer":
        t = cls()
        t._ptr = ptr
        t._owner = owner
        return t

    def _release(self, ptr: int) -> int:
        lib().memra_tokenizer_free(ptr)
        return 0

    def tokenize(self, text: Union[str, bytes], add_special: bool = True, parse_special: bool = False) -> List[int]:
        """memra_tokenize: TEXT (str, or UTF-8 bytes) to token ids."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        flags = (_capi.TOKENIZE_ADD_SPECIAL if add_special else 0) | (
            _capi.TOKENIZE_PARSE_SPECIAL if parse_special else 0
        )
        cap = len(data) + 8
        n = ctypes.c_int32(0)
        for _ in range(2):
            ids = (ctypes.c_int32 * cap)()
            st = lib().memra_tokenize(self.handle, data, len(data), ids, cap, flags, ctypes.byref(n))
            if st == Status.E_RANGE and n.value > cap:
                cap = n.value
                continue
            check(st, "memra_tokenize")
            return list(ids[: n.value])
        raise error(Status.E_INTERNAL, "memra_tokenize: size changed between calls", "memra_tokenize")

    def _bytes_call(self, func: str, call: Callable[[Any, int, Any], int], guess: int) -> bytes:
        cap = max(guess, 16)
        n = ctypes.c_size_t(0)
        for _ in range(2):
            buf = ctypes.create_string_buffer(cap)
            st = call(buf, cap, ctypes.byref(n))
            if st == Status.E_RANGE and n.value > cap:
                cap = n.value
                continue
            check(st, func)
            return buf.raw[: n.value]
        raise error(Status.E_INTERNAL, "%s: size changed between calls" % func, func)

    def detokenize_bytes(
        self,
        ids: Sequence[int],
        remove_special: bool = False,
        unparse_special: bool = False,
        clean_spaces: bool = False,
    ) -> bytes:
        """memra_detokenize: the exact bytes (ids cut inside a UTF-8 sequence give invalid UTF-8)."""
        arr = _arrays.int32s(ids)
        flags = (
            (_capi.DETOKENIZE_REMOVE_SPECIAL if remove_special else 0)
            | (_capi.DETOKENIZE_UNPARSE_SPECIAL if unparse_special else 0)
            | (_capi.DETOKENIZE_CLEAN_SPACES if clean_spaces else 0)
        )
        h = self.handle
        return self._bytes_call(
            "memra_detokenize",
            lambda buf, cap, n: int(lib().memra_detokenize(h, arr, len(ids), buf, cap, flags, n)),
            8 * len(ids) + 16,
        )

    def detokenize(
        self,
        ids: Sequence[int],
        remove_special: bool = False,
        unparse_special: bool = False,
        clean_spaces: bool = False,
    ) -> str:
        """memra_detokenize as text (invalid UTF-8 becomes U+FFFD)."""
        return self.detokenize_bytes(ids, remove_special, unparse_special, clean_spaces).decode(errors="replace")

    def piece(self, token: int, special: bool = False, lstrip: bool = False) -> bytes:
        """memra_token_to_piece: the bytes of one token (control tokens give b"" unless SPECIAL)."""
        flags = (_capi.PIECE_SPECIAL if special else 0) | (_capi.PIECE_LSTRIP if lstrip else 0)
        h = self.handle
        tok = _arrays.int32s([token])[0]
        return self._bytes_call(
            "memra_token_to_piece", lambda buf, cap, n: int(lib().memra_token_to_piece(h, tok, buf, cap, flags, n)), 32
        )

    @property
    def n_vocab(self) -> int:
        return int(lib().memra_tokenizer_n_vocab(self.handle))

    @property
    def model(self) -> str:
        """memra_tokenizer_model: "gpt2", "llama" or "gemma4"."""
        return _s(lib().memra_tokenizer_model(self.handle))

    @property
    def pre(self) -> str:
        """memra_tokenizer_pre: the pre-tokenizer in use."""
        return _s(lib().memra_tokenizer_pre(self.handle))

    def special(self, which: Union[SpecialToken, int]) -> int:
        """memra_tokenizer_special: id of a role, -1 if none."""
        return int(lib().memra_tokenizer_special(self.handle, int(which)))

    @property
    def bos(self) -> int:
        return int(lib().memra_tokenizer_bos(self.handle))

    @property
    def eos(self) -> int:
        return int(lib().memra_tokenizer_eos(self.handle))

    @property
    def eot(self) -> int:
        return int(lib().memra_tokenizer_eot(self.handle))

    @property
    def add_bos(self) -> bool:
        return bool(lib().memra_tokenizer_add_bos(self.handle))

    @property
    def add_eos(self) -> bool:
        return bool(lib().memra_tokenizer_add_eos(self.handle))

    def is_eog(self, token: int) -> bool:
        """memra_tokenizer_is_eog: whether TOKEN ends generation."""
        return bool(lib().memra_tokenizer_is_eog(self.handle, _arrays.int32s([token])[0]))

    def eog_ids(self) -> List[int]:
        """memra_tokenizer_eog_ids: every end-of-generation id, ascending."""
        n = ctypes.c_int32(0)
        cap = 16
        for _ in range(2):
            ids = (ctypes.c_int32 * cap)()
            st = lib().memra_tokenizer_eog_ids(self.handle, ids, cap, ctypes.byref(n))
            if st == Status.E_RANGE and n.value > cap:
                cap = n.value
                continue
            check(st, "memra_tokenizer_eog_ids")
            return list(ids[: n.value])
        raise error(Status.E_INTERNAL, "memra_tokenizer_eog_ids: size changed", "memra_tokenizer_eog_ids")

    @property
    def chat_template(self) -> Optional[str]:
        """memra_tokenizer_chat_template: the GGUF's template text, None if none."""
        t = lib().memra_tokenizer_chat_template(self.handle)
        return t.decode(errors="replace") if t is not None else None

    def render_chat(self, context: Any, params: Any = None) -> str:
        """The tokenizer's chat template rendered for CONTEXT (a dict or its
        JSON text: messages, add_generation_prompt, tools, extras):
        memra_chat_render_tokenizer."""
        from ._chat import render_chat_tokenizer

        return render_chat_tokenizer(self.handle, context, params)

    def token_text(self, token: int) -> Optional[str]:
        """memra_tokenizer_token_text: the stored text, None out of range."""
        t = lib().memra_tokenizer_token_text(self.handle, _arrays.int32s([token])[0])
        return t.decode(errors="replace") if t is not None else None

    def token_score(self, token: int) -> float:
        return float(lib().memra_tokenizer_token_score(self.handle, _arrays.int32s([token])[0]))

    def token_attr(self, token: int) -> int:
        """memra_tokenizer_token_attr: MEMRA_TOKEN_ATTR_* bits (memra.TOKEN_ATTR_*)."""
        return int(lib().memra_tokenizer_token_attr(self.handle, _arrays.int32s([token])[0]))

    def token_id(self, text: Union[str, bytes]) -> int:
        """memra_tokenizer_token_id: the id whose stored text is TEXT, -1 if none."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        return int(lib().memra_tokenizer_token_id(self.handle, data, len(data)))

    @property
    def last_error(self) -> str:
        """memra_tokenizer_last_error."""
        return _s(lib().memra_tokenizer_last_error(self.handle))


# ---- model, cache, snapshot, pending ------------------------------------------------------


class Cache(_Handle):
    """memra_cache_t: one sequence's state (Model.cache())."""

    _kind = "cache"

    def __init__(
        self, model: "Model", n_ctx: int = 0, type_k: Optional[int] = None, type_v: Optional[int] = None
    ) -> None:
        """memra_cache_create (float32 rows), or memra_cache_create_ex when
        TYPE_K or TYPE_V is given (a TensorType: F32, F16, BF16 or Q8_0; the
        other one then takes the default, F16)."""
        super().__init__()
        self.model = model
        h = ctypes.c_void_p()
        if type_k is None and type_v is None:
            check(lib().memra_cache_create(model.handle, n_ctx, ctypes.byref(h)), "memra_cache_create")
        else:
            p = cache_default_params()
            p.n_ctx = n_ctx
            if type_k is not None:
                p.type_k = int(type_k)
            if type_v is not None:
                p.type_v = int(type_v)
            check(lib().memra_cache_create_ex(model.handle, ctypes.byref(p), ctypes.byref(h)), "memra_cache_create_ex")
        self._ptr = h.value

    def _release(self, ptr: int) -> int:
        return int(lib().memra_cache_free(ptr))

    @property
    def pos(self) -> int:
        """memra_cache_pos: tokens consumed so far."""
        return int(lib().memra_cache_pos(self.handle))

    @property
    def capacity(self) -> int:
        """memra_cache_capacity."""
        return int(lib().memra_cache_capacity(self.handle))

    @property
    def type_k(self) -> int:
        """memra_cache_type_k: the K rows' TensorType id."""
        return int(lib().memra_cache_type_k(self.handle))

    @property
    def type_v(self) -> int:
        """memra_cache_type_v: the V rows' TensorType id."""
        return int(lib().memra_cache_type_v(self.handle))

    @property
    def kv_bytes_per_token(self) -> int:
        """memra_cache_kv_bytes_per_token: KV bytes one token takes (all layers)."""
        return int(lib().memra_cache_kv_bytes_per_token(self.handle))

    def kv_bytes(self, n_tokens: int) -> int:
        """memra_cache_kv_bytes: KV bytes the cache holds at n_tokens (with a KV pool: its pages)."""
        return int(lib().memra_cache_kv_bytes(self.handle, n_tokens))

    @property
    def state_bytes(self) -> int:
        """memra_cache_state_bytes: recurrent state bytes of the cache (any capacity)."""
        return int(lib().memra_cache_state_bytes(self.handle))

    def clear(self) -> None:
        """memra_cache_clear: position 0, recurrent state zeroed."""
        check(lib().memra_cache_clear(self.handle), "memra_cache_clear")

    def fork(self, n_ctx: int = 0) -> "Cache":
        """memra_cache_fork: a new cache holding a copy of this one's KV rows
        and recurrent state at its position (N_CTX: the new capacity, 0 = this
        one's). For hybrid models the fork point is the current position."""
        h = ctypes.c_void_p()
        check(lib().memra_cache_fork(self.handle, n_ctx, ctypes.byref(h)), "memra_cache_fork")
        c = Cache.__new__(Cache)
        _Handle.__init__(c)
        c.model = self.model
        c._ptr = h.value
        return c

    def snapshot(self) -> "Snapshot":
        """memra_cache_snapshot."""
        return Snapshot(self)

    def restore(self, snap: "Snapshot") -> None:
        """memra_cache_restore (MisuseError for a snapshot of another cache)."""
        check(lib().memra_cache_restore(self.handle, snap.handle), "memra_cache_restore")


class Snapshot(_Handle):
    """memra_cache_snapshot_t: position and recurrent state of a cache."""

    _kind = "cache snapshot"

    def __init__(self, cache: Cache) -> None:
        super().__init__()
        self.model = cache.model  # a snapshot keeps its model alive
        h = ctypes.c_void_p()
        check(lib().memra_cache_snapshot(cache.handle, ctypes.byref(h)), "memra_cache_snapshot")
        self._ptr = h.value

    def _release(self, ptr: int) -> int:
        lib().memra_cache_snapshot_free(ptr)
        return 0


class Pending(_Handle):
    """memra_pending_t: a queued decode step of one sequence (Model.decode_deferred,
    or one item of Model.forward_batch_deferred). wait() consumes it; close()
    (or leaving a with block) cancels an unconsumed one."""

    _kind = "pending step"

    def __init__(self, model: "Model", cache: Cache, token: Optional[int], ptr: Optional[int] = None) -> None:
        super().__init__()
        self.model = model
        self.cache = cache
        if ptr is not None:  # queued by memra_forward_batch_deferred
            self._ptr = ptr
            return
        if token is None:
            raise ValueError("Pending: a token (or the pointer of a batched step's pending)")
        h = ctypes.c_void_p()
        check(
            lib().memra_decode_step_deferred(model.handle, cache.handle, _arrays.int32s([token])[0], ctypes.byref(h)),
            "memra_decode_step_deferred",
        )
        self._ptr = h.value

    def _release(self, ptr: int) -> int:
        return int(lib().memra_pending_free(ptr))

    def poll(self) -> bool:
        """memra_pending_poll: True when finished (wait() will not block)."""
        st = int(lib().memra_pending_poll(self.handle))
        if st == Status.E_AGAIN:
            return False
        check(st, "memra_pending_poll")
        return True

    def wait(self, out: Any = None) -> Any:
        """memra_pending_wait: blocks, returns the step's n_vocab logits (into OUT if given)."""
        n = self.model.n_vocab
        if out is None:
            logits, ptr = _arrays.new_floats(n)
        else:
            ptr, _keep = _arrays.out_floats(out, n)
            logits = out
        h = self.handle
        self._ptr = None  # consumed whatever the status
        check(lib().memra_pending_wait(h, ptr), "memra_pending_wait")
        return logits


ProgressFn = Callable[[float], Optional[bool]]


class Model(_Handle):
    """memra_model_t: a GGUF model loaded onto an engine.

    ``Model(path)`` loads onto a private CPU engine; ``device="cuda:0"`` makes a
    private engine of that device (destroyed with the model); ``engine=`` uses
    the caller's. ``progress(fraction)`` returning True cancels the load
    (AgainError). Other keywords are the fields of memra_model_params_t
    (pipeline stages: docs/PIPELINE.md); ``params`` passes the struct itself."""

    _kind = "model"

    def __init__(
        self,
        path: PathLike,
        engine: Optional[Engine] = None,
        *,
        device: Optional[str] = None,
        n_layers: int = 0,
        load_mtp: bool = False,
        prefill_chunk: int = 0,
        progress: Optional[ProgressFn] = None,
        n_stages: int = 0,
        devices: Optional[str] = None,
        stage_engines: Optional[Sequence[Optional[Engine]]] = None,
        splits: Optional[Sequence[int]] = None,
        shard: int = -1,
        streams: int = -1,
        overlap: int = -1,
        share_device: int = -1,
        kv_pool_bytes: int = 0,
        kv_page_bytes: int = 0,
        params: Optional[_capi.ModelParams] = None,
    ) -> None:
        super().__init__()
        self._engines: List[Engine] = []  # kept alive (models must not outlive engines)
        self._own_engine: Optional[Engine] = None
        if engine is None and device is not None:
            engine = self._own_engine = Engine(device)
        p = params if params is not None else model_default_params()
        if params is None:
            p.n_layers = n_layers
            p.load_mtp = int(load_mtp)
            p.prefill_chunk = prefill_chunk
            p.n_stages = n_stages
            p.devices = devices.encode() if devices is not None else None
            p.shard, p.streams, p.overlap, p.share_device = shard, streams, overlap, share_device
            p.kv_pool_bytes, p.kv_page_bytes = kv_pool_bytes, kv_page_bytes
            for i, e in enumerate(stage_engines or []):
                if e is not None:
                    p.stage_engines[i] = e.handle
                    self._engines.append(e)
            for i, s in enumerate(splits or []):
                p.splits[i] = s
        if engine is not None:
            p.engine = engine.handle
            self._engines.append(engine)
        failure: List[BaseException] = []
        cb: Any = None
        if progress is not None:
            user_fn = progress

            def _progress(frac: float, _user: Any) -> int:
                try:
                    return 1 if user_fn(frac) else 0
                except BaseException as e:  # re-raised after the load
                    failure.append(e)
                    return 1

            cb = _capi.PROGRESS_FN(_progress)
            p.progress = cb
        h = ctypes.c_void_p()
        try:
            st = lib().memra_model_load(_path(path), ctypes.byref(p), ctypes.byref(h))
            if failure:
                raise failure[0]
            check(st, "memra_model_load")
        except BaseException:
            if self._own_engine is not None:
                self._own_engine.close()
            raise
        finally:
            p.progress = _capi.PROGRESS_FN()
        self._ptr = h.value
        self.path = os.fspath(path)
        self.n_vocab = int(lib().memra_model_n_vocab(self._ptr))

    def _release(self, ptr: int) -> int:
        st = int(lib().memra_model_free(ptr))
        if st == 0 and self._own_engine is not None:
            self._own_engine.close()
        return st

    # introspection
    @property
    def arch(self) -> str:
        return _s(lib().memra_model_arch(self.handle))

    @property
    def n_layers(self) -> int:
        return int(lib().memra_model_n_layers(self.handle))

    @property
    def n_embd(self) -> int:
        return int(lib().memra_model_n_embd(self.handle))

    @property
    def n_ctx_train(self) -> int:
        return int(lib().memra_model_n_ctx_train(self.handle))

    @property
    def n_mtp_layers(self) -> int:
        return int(lib().memra_model_n_mtp_layers(self.handle))

    @property
    def weight_bytes(self) -> int:
        return int(lib().memra_model_weight_bytes(self.handle))

    @property
    def kv_pool_bytes(self) -> Tuple[int, int]:
        """memra_model_kv_pool_bytes: (bytes of KV pages in use, in all); (0, 0) without a pool."""
        used, total = ctypes.c_uint64(), ctypes.c_uint64()
        lib().memra_model_kv_pool_bytes(self.handle, ctypes.byref(used), ctypes.byref(total))
        return int(used.value), int(total.value)

    @property
    def kv_page_bytes(self) -> int:
        """memra_model_kv_page_bytes: bytes of one KV pool page; 0 without a pool."""
        return int(lib().memra_model_kv_page_bytes(self.handle))

    @property
    def n_stages(self) -> int:
        return int(lib().memra_model_n_stages(self.handle))

    def layer_kind(self, il: int) -> LayerKind:
        """memra_model_layer_kind (IndexError out of range)."""
        k = int(lib().memra_model_layer_kind(self.handle, il))
        if k < 0:
            raise IndexError("memra: layer %d out of range [0, %d)" % (il, self.n_layers))
        return LayerKind(k)

    def stage_info(self, stage: int) -> _capi.StageInfo:
        """memra_model_stage_info."""
        info = _capi.StageInfo()
        info.size = ctypes.sizeof(info)
        check(lib().memra_model_stage_info(self.handle, stage, ctypes.byref(info)), "memra_model_stage_info")
        return info

    def pipeline_info(self) -> _capi.PipelineInfo:
        """memra_model_pipeline_info."""
        info = _capi.PipelineInfo()
        info.size = ctypes.sizeof(info)
        check(lib().memra_model_pipeline_info(self.handle, ctypes.byref(info)), "memra_model_pipeline_info")
        return info

    @property
    def gguf(self) -> "Gguf":
        """memra_model_gguf: the model's file (borrowed; dies with the model)."""
        from ._gguf import Gguf

        return Gguf._borrow(int(lib().memra_model_gguf(self.handle)), self)

    @property
    def tokenizer(self) -> Tokenizer:
        """memra_model_tokenizer (borrowed); NotFoundError if the file has none."""
        t = lib().memra_model_tokenizer(self.handle)
        if not t:
            raise NotFoundError(Status.E_NOT_FOUND, "memra_model_tokenizer: %s has no tokenizer" % self.path)
        return Tokenizer._borrow(int(t), self)

    @property
    def chat_template(self) -> Optional[str]:
        """The GGUF's tokenizer.chat_template (Model.chat renders it)."""
        return self.tokenizer.chat_template

    def chat(
        self,
        messages: Sequence[Any],
        max_tokens: int = 128,
        *,
        add_generation_prompt: bool = True,
        tools: Optional[Sequence[Any]] = None,
        variables: Optional[Any] = None,
        **generate_args: Any,
    ) -> Generator[str, None, None]:
        """Streams the reply to MESSAGES ({"role", "content", ...} dicts):
        the model's chat template rendered by the library (with TOOLS and
        extra template VARIABLES such as {"enable_thinking": False}), then
        generate() on that text with its special tokens parsed and no BOS
        added (the template writes its own). GENERATE_ARGS are generate()'s
        sampling arguments."""
        context = dict(variables or {})
        context.update(messages=list(messages), add_generation_prompt=add_generation_prompt)
        if tools is not None:
            context["tools"] = list(tools)
        prompt = self.tokenizer.render_chat(context)
        generate_args.setdefault("add_special", False)
        generate_args.setdefault("parse_special", True)
        return self.generate(prompt, max_tokens, **generate_args)

    @property
    def last_error(self) -> str:
        """memra_model_last_error."""
        return _s(lib().memra_model_last_error(self.handle))

    # tokenizer shortcuts
    def tokenize(self, text: Union[str, bytes], add_special: bool = True, parse_special: bool = False) -> List[int]:
        return self.tokenizer.tokenize(text, add_special, parse_special)

    def detokenize(self, ids: Sequence[int], remove_special: bool = False, unparse_special: bool = False) -> str:
        return self.tokenizer.detokenize(ids, remove_special, unparse_special)

    def piece(self, token: int, special: bool = False) -> bytes:
        return self.tokenizer.piece(token, special)

    def is_eog(self, token: int) -> bool:
        return self.tokenizer.is_eog(token)

    # caches and the forward pass
    def cache(self, n_ctx: int = 0, type_k: Optional[int] = None, type_v: Optional[int] = None) -> Cache:
        """memra_cache_create (0 = the training context, capped at 4096); with
        TYPE_K / TYPE_V, memra_cache_create_ex with those KV storage types."""
        return Cache(self, n_ctx, type_k, type_v)

    def forward(
        self, cache: Cache, tokens: Sequence[int], all_rows: bool = False, out: Any = None, logits: bool = True
    ) -> Any:
        """memra_forward: runs TOKENS at the cache position. Returns the last row's
        n_vocab logits, or with ALL_ROWS every row ([n][n_vocab]); None with
        logits=False. OUT: a float32 buffer to write into (returned as given)."""
        n = len(tokens)
        ids = _arrays.int32s(tokens)
        nrows = n if all_rows else 1
        flags = _capi.FORWARD_ALL_ROWS if all_rows else 0
        result: Any = None
        ptr: Any = None
        if logits:
            if out is None:
                result, ptr = _arrays.new_floats(nrows * self.n_vocab)
            else:
                ptr, _keep = _arrays.out_floats(out, nrows * self.n_vocab)
                result = out
        check(lib().memra_forward(self.handle, cache.handle, ids, n, flags, ptr), "memra_forward")
        if result is not None and out is None and all_rows:
            return _arrays.rows(result, nrows, self.n_vocab)
        return result

    @property
    def max_batch(self) -> int:
        """memra_model_max_batch: items one forward_batch call takes."""
        return int(lib().memra_model_max_batch(self.handle))

    def forward_batch(self, items: Sequence[Any], all_rows: bool = False, logits: bool = True) -> List[Any]:
        """memra_forward_batch: advances several sequences in one pass over the
        weights. ITEMS: (cache, tokens) pairs, one per cache (one token for a
        decode, more for a prompt). Returns, per item, what forward would
        return for it alone (bit for bit): the last row's logits, or with
        ALL_ROWS every row; None with logits=False."""
        n = len(items)
        arr = (_capi.BatchItem * max(n, 1))()
        keep: List[Any] = []
        results: List[Any] = []
        flags = _capi.FORWARD_ALL_ROWS if all_rows else 0
        for i, (cache, tokens) in enumerate(items):
            ids = _arrays.int32s(tokens)
            keep.append(ids)
            nrows = len(tokens) if all_rows else 1
            result: Any = None
            ptr: Any = None
            if logits:
                result, ptr = _arrays.new_floats(nrows * self.n_vocab)
            arr[i].cache = cache.handle
            arr[i].tokens = ctypes.cast(ids, ctypes.POINTER(ctypes.c_int32))
            arr[i].n_tokens = len(tokens)
            arr[i].flags = flags
            arr[i].logits = ptr
            results.append((result, nrows))
        check(lib().memra_forward_batch(self.handle, arr, n, 0), "memra_forward_batch")
        # rows after the call: without numpy they are copies of the flat buffer
        return [_arrays.rows(r, k, self.n_vocab) if r is not None and all_rows else r for r, k in results]

    def forward_batch_deferred(self, items: Sequence[Any]) -> List[Pending]:
        """memra_forward_batch_deferred: queues one batched decode step and
        returns at once. ITEMS: (cache, token) pairs, one per cache. Returns
        a Pending per item; its wait() gives that item's logits, bit for bit
        what forward_batch gives."""
        n = len(items)
        arr = (_capi.BatchItem * max(n, 1))()
        ids = _arrays.int32s([int(tok) for _c, tok in items] or [0])
        for i, (cache, _tok) in enumerate(items):
            arr[i].cache = cache.handle
            arr[i].tokens = ctypes.cast(ctypes.addressof(ids) + 4 * i, ctypes.POINTER(ctypes.c_int32))
            arr[i].n_tokens = 1
        out = (ctypes.c_void_p * max(n, 1))()
        outp = ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p))
        check(lib().memra_forward_batch_deferred(self.handle, arr, n, 0, outp), "memra_forward_batch_deferred")
        return [Pending(self, cache, None, ptr=out[i]) for i, (cache, _tok) in enumerate(items)]

    def decode(self, cache: Cache, token: int, out: Any = None, logits: bool = True) -> Any:
        """memra_decode_step: one token; returns its n_vocab logits (into OUT if given)."""
        result: Any = None
        ptr: Any = None
        if logits:
            if out is None:
                result, ptr = _arrays.new_floats(self.n_vocab)
            else:
                ptr, _keep = _arrays.out_floats(out, self.n_vocab)
                result = out
        check(
            lib().memra_decode_step(self.handle, cache.handle, _arrays.int32s([token])[0], ptr), "memra_decode_step"
        )
        return result

    def decode_deferred(self, cache: Cache, token: int) -> Pending:
        """memra_decode_step_deferred: queues one step; Pending.wait() gives its logits."""
        return Pending(self, cache, token)

    # generation
    def generate_tokens(
        self,
        prompt: Union[str, Sequence[int]],
        max_tokens: int = 128,
        *,
        temperature: Optional[float] = None,
        top_k: Optional[int] = None,
        top_p: Optional[float] = None,
        min_p: Optional[float] = None,
        repeat_penalty: Optional[float] = None,
        repeat_last_n: Optional[int] = None,
        seed: Optional[int] = None,
        sampler: Optional[Sampler] = None,
        stop_at_eog: bool = True,
        add_special: bool = True,
        parse_special: bool = True,
        n_ctx: int = 0,
    ) -> Generator[int, None, None]:
        """Yields up to MAX_TOKENS sampled token ids: tokenizes PROMPT (text, or
        ids as given), prefills it with memra_forward, then samples and runs
        decode steps; stops at an end-of-generation token unless STOP_AT_EOG is
        false. Sampling keywords left None take the library's defaults; SAMPLER
        uses the caller's sampler instead (not closed here). N_CTX: the cache
        size (0 = prompt + max_tokens; smaller raises CacheFullError once full).
        The cache lives as long as the iterator."""
        if isinstance(prompt, (str, bytes)):
            ids = self.tokenize(prompt, add_special, parse_special)
        else:
            ids = [int(t) for t in prompt]
        if not ids:
            raise error(Status.E_INVALID, "memra: generate: the prompt has no tokens", "generate")
        if max_tokens <= 0:
            return
        tok = self.tokenizer
        size = n_ctx if n_ctx > 0 else len(ids) + max_tokens
        own: Any = (
            Sampler(temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed)
            if sampler is None
            else contextlib.nullcontext(sampler)
        )
        with own as s, self.cache(size) as cache:
            for t in ids:
                s.accept(t)
            logits = self.forward(cache, ids)
            for i in range(max_tokens):
                t = s.sample(logits)
                if stop_at_eog and tok.is_eog(t):
                    return
                s.accept(t)
                yield t
                if i + 1 < max_tokens:
                    logits = self.decode(cache, t, out=logits)

    def generate(
        self,
        prompt: Union[str, Sequence[int]],
        max_tokens: int = 128,
        *,
        temperature: Optional[float] = None,
        top_k: Optional[int] = None,
        top_p: Optional[float] = None,
        min_p: Optional[float] = None,
        repeat_penalty: Optional[float] = None,
        repeat_last_n: Optional[int] = None,
        seed: Optional[int] = None,
        sampler: Optional[Sampler] = None,
        stop_at_eog: bool = True,
        add_special: bool = True,
        parse_special: bool = True,
        n_ctx: int = 0,
    ) -> Generator[str, None, None]:
        """Streams the text of generate_tokens() (same arguments) in pieces as the
        tokens come; a token ending inside a UTF-8 sequence is held back until the
        sequence completes. Control tokens give no text. Closing the iterator
        early frees its cache (and its sampler, unless SAMPLER was given)."""
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        tok = self.tokenizer
        tokens = self.generate_tokens(
            prompt,
            max_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            repeat_penalty=repeat_penalty,
            repeat_last_n=repeat_last_n,
            seed=seed,
            sampler=sampler,
            stop_at_eog=stop_at_eog,
            add_special=add_special,
            parse_special=parse_special,
            n_ctx=n_ctx,
        )
        for t in tokens:
            text = dec.decode(tok.piece(t))
            if text:
                yield text
        tail = dec.decode(b"", final=True)
        if tail:
            yield tail


__all__ = [
    "Backend",
    "Cache",
    "Engine",
    "HostBuffer",
    "LayerKind",
    "MemraError",
    "Model",
    "Pending",
    "Sampler",
    "Snapshot",
    "SpecialToken",
    "Tokenizer",
    "engine_default_params",
    "model_default_params",
    "sampler_default_params",
]
