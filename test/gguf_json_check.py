#!/usr/bin/env python3
"""Independent check of memra-gguf-info.

usage: gguf_json_check.py TOOL FIXTURES_DIR

Parses every GGUF under FIXTURES_DIR/{models,tokenizer,quant} with the small
reader below (written from docs/model-spec.md section 1, standard library
only, no memra code) and compares it with `TOOL FILE --json`: key names in
file order, value types and values (floats within float32 precision),
tensor names, types, shapes and offsets. Text mode is checked too: it must
run, report the same counts, and name each scalar key's type. A synthetic
file with every value type and awkward strings is checked first.

Exit status: 0 all match, 1 a mismatch or failure, 77 (skip) when
FIXTURES_DIR does not exist.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

# GGUF value types (spec 1.2)
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
VTYPE_NAMES = ["UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
               "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"]
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i",
              F32: "<f", BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}
INT_TYPES = {U8, I8, U16, I16, U32, I32, U64, I64}

# ggml tensor types (spec 1.3 and 2): id -> (name, elements per block, bytes per block)
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18),
}


class GGUFError(Exception):
    pass


class Reader:
    def __init__(self, data):
        self.d = data
        self.pos = 0

    def take(self, n):
        if n > len(self.d) - self.pos:
            raise GGUFError("truncated at byte %d" % self.pos)
        b = self.d[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self):
        return self.take(self.unpack("<Q"))

    def value(self, t):
        if t == STR:
            return self.string()
        if t == ARR:
            et = self.unpack("<I")
            n = self.unpack("<Q")
            if et == ARR or et >= len(VTYPE_NAMES):
                raise GGUFError("bad array element type %d" % et)
            if et == STR:
                return (et, [self.string() for _ in range(n)])
            fmt = SCALAR_FMT[et]
            size = struct.calcsize(fmt)
            raw = self.take(n * size)
            return (et, [v[0] for v in struct.iter_unpack(fmt, raw)])
        if t not in SCALAR_FMT:
            raise GGUFError("bad value type %d" % t)
        return self.unpack(SCALAR_FMT[t])


def read_gguf(data, with_layout=False):
    """Returns {'version', 'kv': [(key, type, value)], 'tensors': [...], 'alignment'}."""
    r = Reader(data)
    if r.take(4) != b"GGUF":
        raise GGUFError("bad magic")
    version = r.unpack("<I")
    if version not in (2, 3):
        raise GGUFError("version %d" % version)
    n_tensors = r.unpack("<Q")
    n_kv = r.unpack("<Q")
    kv = []
    for _ in range(n_kv):
        key = r.string().decode("utf-8")
        t = r.unpack("<I")
        kv.append((key, t, r.value(t)))
    alignment = 32
    for key, t, v in kv:
        if key == "general.alignment":
            if t != U32 or v == 0 or v & (v - 1):
                raise GGUFError("bad general.alignment")
            alignment = v
    tensors = []
    for _ in range(n_tensors):
        name = r.string().decode("utf-8")
        nd = r.unpack("<I")
        if not 1 <= nd <= 4:
            raise GGUFError("tensor %s has %d dims" % (name, nd))
        ne = [r.unpack("<Q") for _ in range(nd)]
        ttype = r.unpack("<I")
        off = r.unpack("<Q")
        if ttype not in GGML_TYPES:
            raise GGUFError("tensor %s has unknown type %d" % (name, ttype))
        _, blck, bb = GGML_TYPES[ttype]
        if ne[0] % blck:
            raise GGUFError("tensor %s: ne0 not a multiple of the block" % name)
        nbytes = ne[0] // blck * bb
        for d in ne[1:]:
            nbytes *= d
        tensors.append({"name": name, "type": ttype, "shape": ne, "offset": off, "nbytes": nbytes})
    info_end = r.pos
    data_start = (info_end + alignment - 1) // alignment * alignment if tensors else info_end
    expect = 0
    for t in tensors:
        if t["offset"] != expect:
            raise GGUFError("tensor %s offset %d, expected %d" % (t["name"], t["offset"], expect))
        if data_start + t["offset"] + t["nbytes"] > len(data):
            raise GGUFError("tensor %s past the end of the file" % t["name"])
        expect += (t["nbytes"] + alignment - 1) // alignment * alignment
    out = {"version": version, "kv": kv, "tensors": tensors, "alignment": alignment}
    if with_layout:
        out["info_end"] = info_end
        out["data_start"] = data_start
    return out


# ---- a small writer, for the synthetic file and the fuzz seeds -------------

def w_str(b):
    if isinstance(b, str):
        b = b.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def w_value(t, v):
    if t == STR:
        return w_str(v)
    if t == ARR:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        if et == STR:
            return out + b"".join(w_str(s) for s in items)
        return out + b"".join(struct.pack(SCALAR_FMT[et], x) for x in items)
    return struct.pack(SCALAR_FMT[t], v)


def write_gguf(kv, tensors, version=3, alignment=32):
    """kv: [(key, type, value)]; tensors: [(name, type, ne, data bytes)]."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv)))
    for key, t, v in kv:
        out += w_str(key) + struct.pack("<I", t) + w_value(t, v)
    off = 0
    for name, ttype, ne, data in tensors:
        out += w_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", ttype, off)
        off += (len(data) + alignment - 1) // alignment * alignment
    if tensors:
        out += bytes(-len(out) % alignment)
        for _, _, _, data in tensors:
            out += data + bytes(-len(data) % alignment)
    return bytes(out)


# ---- comparison ------------------------------------------------------------

def as_text(b):
    # the tool prints string bytes as they are; keep undecodable bytes comparable
    return b.decode("utf-8", "surrogateescape")


def same_float(t, fv, jv):
    if not math.isfinite(fv):
        return jv is None
    if isinstance(jv, bool) or not isinstance(jv, (int, float)):
        return False
    if t == F32:  # printed with 9 significant digits: exact after rounding to f32
        try:
            return struct.pack("<f", float(jv)) == struct.pack("<f", fv) or fv == float(jv)
        except OverflowError:
            return False
    return fv == float(jv) or math.isclose(fv, float(jv), rel_tol=1e-15)


def same_value(t, fv, jv):
    if t in INT_TYPES:
        return isinstance(jv, int) and not isinstance(jv, bool) and jv == fv
    if t == BOOL:
        return isinstance(jv, bool) and jv == bool(fv)
    if t in (F32, F64):
        return same_float(t, fv, jv)
    if t == STR:
        return isinstance(jv, str) and jv == as_text(fv)
    return False


class Checker:
    def __init__(self, tool):
        self.tool = tool
        self.errors = 0

    def fail(self, path, msg):
        self.errors += 1
        if self.errors <= 50:
            print("FAIL %s: %s" % (path, msg))

    def run_tool(self, path, *args):
        p = subprocess.run([self.tool, path] + list(args), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        if p.returncode != 0:
            raise GGUFError("%s %s exited %d: %s" % (self.tool, " ".join(args), p.returncode,
                                                    p.stderr.decode(errors="replace")))
        return p.stdout.decode("utf-8", "surrogateescape")

    def check(self, path):
        with open(path, "rb") as f:
            data = f.read()
        ref = read_gguf(data)
        try:
            js = json.loads(self.run_tool(path, "--json"))
            text = self.run_tool(path)
        except (GGUFError, ValueError) as e:
            self.fail(path, str(e))
            return
        before = self.errors
        if js.get("version") != ref["version"]:
            self.fail(path, "version %r, expected %d" % (js.get("version"), ref["version"]))
        jkv = js.get("kv", {})
        keys = [k for k, _, _ in ref["kv"]]
        if list(jkv.keys()) != keys:
            self.fail(path, "key list differs: tool has %d keys, file has %d; first difference: %r"
                      % (len(jkv), len(keys), next(((a, b) for a, b in zip(jkv, keys) if a != b),
                                                   None)))
        for key, t, v in ref["kv"]:
            if key not in jkv:
                continue
            jv = jkv[key]
            if t == ARR:
                et, items = v
                if not isinstance(jv, list) or len(jv) != len(items):
                    self.fail(path, "%s: array of %d %s, tool gives %s" % (
                        key, len(items), VTYPE_NAMES[et],
                        "%d items" % len(jv) if isinstance(jv, list) else type(jv).__name__))
                    continue
                for j, (a, b) in enumerate(zip(items, jv)):
                    if not same_value(et, a, b):
                        self.fail(path, "%s[%d] (%s): file %r, tool %r" % (key, j, VTYPE_NAMES[et], a, b))
                        break
            elif not same_value(t, v, jv):
                self.fail(path, "%s (%s): file %r, tool %r" % (key, VTYPE_NAMES[t], v, jv))
        jt = js.get("tensors", [])
        if len(jt) != len(ref["tensors"]):
            self.fail(path, "%d tensors, tool lists %d" % (len(ref["tensors"]), len(jt)))
        for t, j in zip(ref["tensors"], jt):
            want = {"name": t["name"], "type": GGML_TYPES[t["type"]][0], "shape": t["shape"],
                    "offset": t["offset"]}
            if j != want:
                self.fail(path, "tensor %r, tool %r" % (want, j))
        self.check_text(path, ref, text)
        if self.errors == before:
            print("ok   %s: %d keys, %d tensors" % (path, len(keys), len(ref["tensors"])))

    def check_text(self, path, ref, text):
        lines = text.split("\n")
        head = "%s: GGUF v%d, %d keys, %d tensors, alignment %d, 1 shard(s)" % (
            path, ref["version"], len(ref["kv"]), len(ref["tensors"]), ref["alignment"])
        if lines[0] != head:
            self.fail(path, "text header %r, expected %r" % (lines[0], head))
            return
        body = lines[1:]
        for n, (key, t, v) in enumerate(ref["kv"]):
            if n >= len(body) or not body[n].startswith("  " + key + " "):
                self.fail(path, "text line for key %s missing" % key)
                return
            typ = body[n][2 + len(key):].split(None, 1)[0] if body[n][2 + len(key):].strip() else ""
            if typ != VTYPE_NAMES[t]:
                self.fail(path, "text: key %s has type %s, expected %s" % (key, typ, VTYPE_NAMES[t]))
            if t == ARR and len(v[1]) > 8:
                tail = "(%d %s)]" % (len(v[1]), VTYPE_NAMES[v[0]])
                if not body[n].endswith(tail):
                    self.fail(path, "text: array %s does not end with %r" % (key, tail))
        for n, t in enumerate(ref["tensors"]):
            line = body[len(ref["kv"]) + n] if len(ref["kv"]) + n < len(body) else ""
            f = line.split()
            dims = "[" + ", ".join(str(d) for d in t["shape"]) + "]"
            if (len(f) < 5 or f[0] != "tensor" or f[1] != t["name"] or f[2] != GGML_TYPES[t["type"]][0]
                    or not line.endswith("%s offset %d" % (dims, t["offset"]))):
                self.fail(path, "text tensor line %r" % line)


def synthetic(path):
    """Every value type, edge values, and strings that need JSON escaping."""
    kv = [
        ("s.u8", U8, 255), ("s.i8", I8, -128), ("s.u16", U16, 65535), ("s.i16", I16, -32768),
        ("s.u32", U32, 4294967295), ("s.i32", I32, -2147483648), ("s.f32", F32, 0.1),
        ("s.f32.big", F32, 3.4028234663852886e38), ("s.f32.tiny", F32, 1e-45),
        ("s.f32.nan", F32, float("nan")), ("s.f32.inf", F32, float("-inf")), ("s.bool", BOOL, 1),
        ("s.u64", U64, 2 ** 64 - 1), ("s.i64", I64, -2 ** 63), ("s.f64", F64, 2.0 ** -1074),
        ("s.f64.pi", F64, math.pi), ("s.str", STR, 'quote " backslash \\ tab \t nl \n cr \r'),
        ("s.ctl", STR, "\x01\x1f\x7f\x08\x0c"), ("s.utf8", STR, "h\u00e9llo \u2014 \U0001F600"),
        ("s.empty", STR, ""),
        ("a.str", ARR, (STR, ["", "a", "\n", "\u2581the", ""])), ("a.empty", ARR, (U32, [])),
        ("a.bool", ARR, (BOOL, [1, 0, 1])), ("a.f32", ARR, (F32, [1.5, -0.0, 1e30, float("inf")])),
        ("a.i64", ARR, (I64, [-1, 2 ** 63 - 1])), ("a.u8", ARR, (U8, list(range(20)))),
        ("a.f64", ARR, (F64, [1e-300, -2.5])), ("a.i16", ARR, (I16, [-1, 1])),
    ]
    tensors = [("t.f32", 0, [3, 2], bytes(24)), ("t.q8_0", 8, [64, 1, 2], bytes(34 * 4)),
               ("t.q4_k", 12, [256, 1, 1, 2], bytes(144 * 2))]
    with open(path, "wb") as f:
        f.write(write_gguf(kv + [("general.alignment", U32, 64)], tensors, alignment=64))


def fixture_files(root):
    for sub in ("models", "tokenizer", "quant"):
        d = os.path.join(root, sub)
        if os.path.isdir(d):
            for name in sorted(os.listdir(d)):
                if name.endswith(".gguf"):
                    yield os.path.join(d, name)


def main(argv):
    if len(argv) != 3:
        print(__doc__)
        return 2
    tool, root = argv[1], argv[2]
    c = Checker(tool)
    with tempfile.TemporaryDirectory() as tmp:
        p = os.path.join(tmp, "synthetic.gguf")
        synthetic(p)
        c.check(p)
    if not os.path.isdir(root):
        print("SKIP: fixture folder %s not found" % root)
        return 1 if c.errors else 77
    files = list(fixture_files(root))
    if not files:
        print("SKIP: no GGUF files under %s" % root)
        return 1 if c.errors else 77
    for p in files:
        try:
            c.check(p)
        except GGUFError as e:
            c.fail(p, "reference parser: %s" % e)
    print("%d files, %d mismatches" % (len(files) + 1, c.errors))
    return 1 if c.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
