#!/usr/bin/env python3
"""memra-server against a client written with Python's standard library, on
127.0.0.1 with the bundled default model (CPU):

1. /health, /v1/models, /metrics (Prometheus text).
2. /v1/completions and /v1/chat/completions, non-stream and stream (SSE
   events of valid JSON, ending with [DONE]): usage, finish_reason, stop
   strings (never in the output, streamed or not), max_tokens, seed
   determinism at temperature > 0, and a greedy completion equal to
   memra-run's greedy continuation of the same prompt.
3. Bad requests: malformed JSON, wrong types, unsupported values, unknown
   model or path, wrong method, oversize bodies -> 400/404/405/413 with an
   OpenAI-style error object.
4. Batched steps: 8 greedy requests of different prompts and lengths give
   the same texts run at once (one batched step a round, prompts fed in
   chunks of --batch-prefill-chunk between the decodes) as run one at a
   time (steps of one item), and /metrics shows steps of several items.
   Then 16 concurrent clients each running a bounded loop of requests
   (greedy ones must give the same text as alone: the sequences do not
   mix).
5. A slow client (body sent and response read in dribbles) and clients that
   leave mid-request: their sequences are cancelled, and afterwards the
   server still answers and /metrics shows no active sequence.
6. A second server with --api-key, --parallel 1 --queue 1: 401 without the
   key, 503 (queue_full) when the queue overflows; SIGTERM stops it.

usage: server_check.py MEMRA-SERVER MEMRA-RUN DEFAULT.GGUF
Exits 77 (skipped) when MEMRA-SERVER is "-" (not built: libmicrohttpd or
jansson missing at configure time)."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

failed = 0
PROMPT = "The quick brown fox"


def check(label, ok, detail=""):
    global failed
    print("%-64s %s" % (label, "ok" if ok else "FAILED " + str(detail)[:1500]), flush=True)
    failed += not ok
    return ok


class Server:
    def __init__(self, exe, model, *args):
        self.proc = subprocess.Popen([exe, "-m", model, "--port", "0"] + list(args), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log = []
        self.port = None
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.log.append(line)
                m = re.search(r"listening on http://[^ ]*:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        ready.wait(30)
        if not self.port:
            raise RuntimeError("the server did not start:\n" + "".join(self.log))

    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=60):
        """(status, headers, body bytes)"""
        c = self.conn(timeout)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, r.headers, data

    def post(self, path, body, **kw):
        status, _, data = self.request("POST", path, body, **kw)
        try:
            return status, json.loads(data)
        except ValueError:
            return status, data

    def stream(self, path, body, headers=None):
        """(status, list of parsed events, saw [DONE] last)"""
        body = dict(body, stream=True)
        c = self.conn()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request("POST", path, body=json.dumps(body), headers=h)
        r = c.getresponse()
        if r.status != 200:
            data = r.read()
            c.close()
            return r.status, [json.loads(data)], False
        events, done = [], False
        for raw in r.read().decode("utf-8").split("\n\n"):
            if not raw.strip():
                continue
            assert raw.startswith("data: "), raw
            payload = raw[6:]
            assert not done, "an event after [DONE]"
            if payload == "[DONE]":
                done = True
            else:
                events.append(json.loads(payload))
        c.close()
        return r.status, events, done

    def metrics(self):
        status, headers, data = self.request("GET", "/metrics")
        out = {}
        for line in data.decode().splitlines():
            if line.startswith("#") or not line:
                continue
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
        return out

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


def streamed_text(events, chat):
    parts = []
    for e in events:
        for ch in e.get("choices", []):
            parts.append(ch["delta"].get("content") or "" if chat else ch["text"])
    return "".join(parts)


def finish_of(events):
    reasons = [ch["finish_reason"] for e in events for ch in e.get("choices", []) if ch.get("finish_reason")]
    return reasons


def is_error(body, status, code=None):
    if not isinstance(body, dict) or set(body) != {"error"}:
        return False
    e = body["error"]
    return (set(e) >= {"message", "type", "param", "code"} and isinstance(e["message"], str) and e["message"]
            and (code is None or e["code"] == code) and status >= 400)


def raw_exchange(port, data, read=True, timeout=10):
    """Sends DATA over a fresh socket; returns the status line's code (or None)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
    except OSError:
        pass
    resp = b""
    try:
        while read and b"\r\n\r\n" not in resp:
            chunk = s.recv(4096)
            if not chunk:
                break
            resp += chunk
    except OSError:
        pass
    s.close()
    m = re.match(rb"HTTP/1\.[01] (\d+)", resp)
    return int(m.group(1)) if m else None, resp


def memra_run_greedy(run_exe, model, n):
    r = subprocess.run([run_exe, "-m", model, "-p", PROMPT, "-n", str(n), "--temp", "0"], capture_output=True,
                       timeout=120)
    out = r.stdout
    assert r.returncode == 0 and out.startswith(PROMPT.encode()) and out.endswith(b"\n"), r
    return out[len(PROMPT):-1].decode("utf-8", errors="replace")


def basic(srv, run_exe, model):
    st, _, data = srv.request("GET", "/health")
    check("GET /health", st == 200 and json.loads(data) == {"status": "ok"}, (st, data))
    st, _, data = srv.request("GET", "/v1/models")
    models = json.loads(data)
    check("GET /v1/models", st == 200 and models["object"] == "list" and models["data"][0]["id"] == "default",
          (st, data))

    # greedy completion == memra-run's greedy continuation
    want = memra_run_greedy(run_exe, model, 24)
    st, r = srv.post("/v1/completions", {"model": "default", "prompt": PROMPT, "max_tokens": 24, "temperature": 0})
    ok = st == 200 and r["object"] == "text_completion" and r["choices"][0]["finish_reason"] == "length"
    check("completions: 200, finish_reason length", ok, (st, r))
    text = r["choices"][0]["text"] if ok else ""
    check("completions: greedy text == memra-run's", text == want, (text, want))
    check("completions: usage", ok and r["usage"] == {"prompt_tokens": 9, "completion_tokens": 24,
                                                       "total_tokens": 33}, r)
    st, ev, done = srv.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": 24, "temperature": 0,
                                                  "stream_options": {"include_usage": True}})
    check("completions stream: [DONE], same text", st == 200 and done and streamed_text(ev, False) == want,
          (st, done, ev[-3:]))
    check("completions stream: finish_reason and usage", finish_of(ev) == ["length"] and
          ev[-1]["choices"] == [] and ev[-1]["usage"]["completion_tokens"] == 24, ev[-2:])

    # max_tokens
    st, r = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 5, "temperature": 0})
    check("max_tokens 5", st == 200 and r["usage"]["completion_tokens"] == 5 and
          r["choices"][0]["finish_reason"] == "length", r)

    # stop strings: cut where the first one starts, never shown, streamed or not
    stop = text[7:11]
    if check("stop string taken from the greedy text", len(stop) == 4 and "\ufffd" not in stop, stop):
        cut = text[:text.find(stop)]
        for stops in (stop, ["zzzqqq", stop]):
            st, r = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 24, "temperature": 0, "stop": stops})
            check("stop %r: text cut, finish_reason stop" % (stops,), st == 200 and
                  r["choices"][0]["text"] == cut and r["choices"][0]["finish_reason"] == "stop", (r, cut))
            st, ev, done = srv.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": 24, "temperature": 0,
                                                          "stop": stops})
            check("stop %r streamed: no part of it sent" % (stops,), done and streamed_text(ev, False) == cut and
                  finish_of(ev) == ["stop"], (streamed_text(ev, False), cut))

    # chat, non-stream and stream, content as a string and as text parts
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
    st, r = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 12, "temperature": 0})
    ok = (st == 200 and r["object"] == "chat.completion" and r["choices"][0]["message"]["role"] == "assistant"
          and r["choices"][0]["finish_reason"] in ("stop", "length") and r["usage"]["prompt_tokens"] > 0)
    check("chat: 200, message, usage", ok, (st, r))
    chat_text = r["choices"][0]["message"]["content"] if ok else None
    parts = [msgs[0], {"role": "user", "content": [{"type": "text", "text": "Hello there"}]}]
    st, r2 = srv.post("/v1/chat/completions", {"messages": parts, "max_completion_tokens": 12, "temperature": 0})
    check("chat: content as text parts == as a string", st == 200 and
          r2["choices"][0]["message"]["content"] == chat_text, (r2, chat_text))
    st, ev, done = srv.stream("/v1/chat/completions", {"messages": msgs, "max_tokens": 12, "temperature": 0})
    check("chat stream: role first, same text, [DONE]", st == 200 and done and
          ev[0]["choices"][0]["delta"].get("role") == "assistant" and streamed_text(ev, True) == chat_text and
          ev[-1]["object"] == "chat.completion.chunk", (done, ev[:2], streamed_text(ev, True), chat_text))
    check("chat stream: one finish_reason", finish_of(ev) == [r["choices"][0]["finish_reason"]], finish_of(ev))
    st, r = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 4, "temperature": 0,
                                              "tools": [{"type": "function", "function": {"name": "f",
                                                                                        "parameters": {}}}]})
    check("chat with tools: the template renders them", st == 200 and r["usage"]["prompt_tokens"] >
          json.loads(json.dumps(r))["usage"]["completion_tokens"], (st, r))

    # seed determinism at temperature > 0
    def sample(seed):
        st, r = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 16, "temperature": 1.0, "top_k": 0,
                                             "top_p": 1, "min_p": 0, "seed": seed})
        return r["choices"][0]["text"] if st == 200 else ("error", st, r)
    a, b = sample(1234), sample(1234)
    check("seed: same seed, same text", a == b and not isinstance(a, tuple), (a, b))
    others = [sample(s) for s in (1, 2, 3)]
    check("seed: other seeds, other texts", any(o != a for o in others), others)
    st, r = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 8, "temperature": 0.7, "seed": 9,
                                         "presence_penalty": 1.5, "frequency_penalty": 0.5,
                                         "logit_bias": {"5": -100}, "repeat_penalty": 1.1})
    check("penalties and logit_bias accepted", st == 200 and r["usage"]["completion_tokens"] >= 1, r)
    return text


def bad_requests(srv):
    cases = [
        ("malformed JSON", "/v1/completions", '{"prompt": "x", ', 400, "invalid_json"),
        ("body not an object", "/v1/completions", "[1, 2]", 400, None),
        ("max_tokens a string", "/v1/completions", {"prompt": "x", "max_tokens": "10"}, 400, None),
        ("max_tokens 0", "/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, None),
        ("temperature a string", "/v1/completions", {"prompt": "x", "temperature": "hot"}, 400, None),
        ("top_p 2", "/v1/completions", {"prompt": "x", "top_p": 2}, 400, None),
        ("stop a number", "/v1/completions", {"prompt": "x", "stop": 5}, 400, None),
        ("n 2", "/v1/completions", {"prompt": "x", "n": 2}, 400, None),
        ("stream a string", "/v1/completions", {"prompt": "x", "stream": "yes"}, 400, None),
        ("logit_bias bad token", "/v1/completions", {"prompt": "x", "logit_bias": {"abc": 1}}, 400, None),
        ("prompt missing", "/v1/completions", {"max_tokens": 3}, 400, None),
        ("prompt token out of range", "/v1/completions", {"prompt": [1, 99999999]}, 400, None),
        ("messages a string", "/v1/chat/completions", {"messages": "hi"}, 400, None),
        ("message without role", "/v1/chat/completions", {"messages": [{"content": "hi"}]}, 400, None),
        ("image content part", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 400, None),
        ("unknown model", "/v1/chat/completions", {"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]},
         404, "model_not_found"),
        ("prompt longer than the context", "/v1/completions", {"prompt": "word " * 3000}, 400,
         "context_length_exceeded"),
    ]
    for label, path, body, want, code in cases:
        st, r = srv.post(path, body)
        check("bad request: %s -> %d" % (label, want), st == want and is_error(r, st, code), (st, r))
    st, _, data = srv.request("GET", "/v2/nothing")
    check("unknown path -> 404", st == 404 and is_error(json.loads(data), st), (st, data))
    st, h, data = srv.request("GET", "/v1/chat/completions")
    check("GET on a POST endpoint -> 405", st == 405 and h.get("Allow") == "POST" and is_error(json.loads(data), st),
          (st, data))
    st, _, data = srv.request("DELETE", "/v1/models")
    check("DELETE /v1/models -> 405", st == 405, st)
    # 413 from Content-Length alone: the body is never sent
    code, resp = raw_exchange(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                                        b"\r\nContent-Length: 10000000\r\n\r\n")
    check("oversize body (Content-Length) -> 413", code == 413, resp[:300])
    # 413 for a chunked body that grows past the limit
    big = json.dumps({"prompt": "x" * 70000}).encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(big[i:i + 8192]), big[i:i + 8192]) for i in range(0, len(big), 8192))
    code, resp = raw_exchange(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                                        b"\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n")
    check("oversize body (chunked) -> 413", code == 413, resp[:300])
    if code == 413:
        body = resp.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in resp else b""
        check("413 carries the error JSON", b'"request_too_large"' in body or body == b"", body[:300])


BATCH_PROMPTS = ["The quick brown fox", "Once upon a time", "In the beginning", "1, 2, 3, 4, 5,",
                 "The capital of France is", "def fibonacci(n):",
                 "A long time ago in a galaxy far, far away, there lived a", "Hello"]


def steps_of(m):
    """(batched steps, steps of more than one item) from /metrics"""
    return m.get("memra_batch_size_count", 0), m.get("memra_batch_size_count", 0) - m.get(
        'memra_batch_size_bucket{le="1"}', 0)


def batched_exact(srv):
    def greedy(i):
        body = {"prompt": BATCH_PROMPTS[i], "max_tokens": 10 + 3 * i, "temperature": 0}
        if i % 2:
            st, ev, done = srv.stream("/v1/completions", body)
            return streamed_text(ev, False) if st == 200 and done else ("error", st, ev)
        st, r = srv.post("/v1/completions", body)
        return r["choices"][0]["text"] if st == 200 else ("error", st, r)

    m0 = srv.metrics()
    alone = [greedy(i) for i in range(len(BATCH_PROMPTS))]
    m1 = srv.metrics()
    check("batched: 8 greedy requests one at a time", all(isinstance(t, str) and t for t in alone), alone)
    (n0, multi0), (n1, multi1) = steps_of(m0), steps_of(m1)
    check("batched: one at a time, every step has one item", n1 > n0 and multi1 == multi0, (n0, n1, multi0, multi1))

    together = [None] * len(BATCH_PROMPTS)
    barrier = threading.Barrier(len(BATCH_PROMPTS))

    def client(i):
        try:
            barrier.wait(30)
            together[i] = greedy(i)
        except Exception as e:  # noqa: BLE001 (any failure of a client is a test failure)
            together[i] = ("exception", repr(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(BATCH_PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    m2 = srv.metrics()
    bad = [(i, a, b) for i, (a, b) in enumerate(zip(alone, together)) if a != b]
    check("batched: 8 concurrent greedy requests == one at a time", not bad, bad[:3])
    n2, multi2 = steps_of(m2)
    check("batched: steps of more than one item while concurrent", multi2 > multi1,
          {k: v for k, v in m2.items() if "batch_size" in k})
    check("batched: batch_size_sum counts the items", m2["memra_batch_size_sum"] - m1["memra_batch_size_sum"] >
          n2 - n1 and m2["memra_batch_size_mean"] > 1, (m1, m2))
    check("batched: steps_per_second > 0", m2.get("memra_steps_per_second", 0) > 0, m2.get("memra_steps_per_second"))


def concurrent(srv, greedy_text):
    errors = []
    lock = threading.Lock()

    def client(i):
        for j in range(3):
            try:
                kind = (i + j) % 4
                if kind == 0:
                    st, r = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 24, "temperature": 0})
                    ok = st == 200 and r["choices"][0]["text"] == greedy_text
                elif kind == 1:
                    st, ev, done = srv.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": 24,
                                                                  "temperature": 0})
                    ok = st == 200 and done and streamed_text(ev, False) == greedy_text
                elif kind == 2:
                    st, r = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi %d" % i}],
                                                              "max_tokens": 10 + i, "seed": i})
                    ok = st == 200 and r["usage"]["completion_tokens"] <= 10 + i
                else:
                    st, ev, done = srv.stream("/v1/chat/completions",
                                              {"messages": [{"role": "user", "content": "hey"}], "max_tokens": 8})
                    ok = st == 200 and done and len(finish_of(ev)) == 1
                if not ok:
                    with lock:
                        errors.append((i, j, kind, st))
            except Exception as e:  # noqa: BLE001 (any failure of a client is a test failure)
                with lock:
                    errors.append((i, j, repr(e)))

    t0 = time.time()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    check("16 concurrent clients x 3 requests (%.1f s)" % (time.time() - t0), not errors, errors[:5])


def slow_and_gone(srv):
    m0 = srv.metrics()
    # a client that sends its body in dribbles, then reads the stream a few bytes at a time
    body = json.dumps({"prompt": PROMPT, "max_tokens": 16, "temperature": 0, "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d"
              b"\r\n\r\n" % len(body))
    for i in range(0, len(body), 16):
        s.sendall(body[i:i + 16])
        time.sleep(0.02)
    resp = b""
    while True:
        chunk = s.recv(64)
        if not chunk:
            break
        resp += chunk
        if b"data: [DONE]" in resp:
            break
        time.sleep(0.005)
    s.close()
    check("slow client: full stream received", resp.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in resp,
          resp[-300:])

    # a stream client that leaves after the first event
    body = json.dumps({"prompt": PROMPT, "temperature": 0, "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d"
              b"\r\n\r\n%s" % (len(body), body))
    got = b""
    while b"data: " not in got:
        got += s.recv(4096)
    s.close()
    # a non-stream client that leaves while its (long) reply is being generated
    body = json.dumps({"prompt": PROMPT, "temperature": 0}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d"
              b"\r\n\r\n%s" % (len(body), body))
    time.sleep(0.2)
    s.close()

    deadline = time.time() + 10
    while True:
        m = srv.metrics()
        if m.get("memra_active_sequences") == 0 or time.time() > deadline:
            break
        time.sleep(0.1)
    cancelled = m['memra_sequences_total{result="cancelled"}'] - m0['memra_sequences_total{result="cancelled"}']
    check("clients gone: both sequences cancelled", cancelled == 2, cancelled)
    check("no sequence left active, none queued", m["memra_active_sequences"] == 0 and m["memra_queue_depth"] == 0,
          {k: v for k, v in m.items() if "active" in k or "queue" in k})
    st, r = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 4})
    check("the server still answers", st == 200 and r["usage"]["completion_tokens"] == 4, (st, r))


def metrics(srv):
    st, h, data = srv.request("GET", "/metrics")
    lines = data.decode().splitlines()
    ok = st == 200 and h.get("Content-Type", "").startswith("text/plain") and all(
        l.startswith("# ") or re.match(r'^memra_[a-z_]+(\{[a-z]+="[^"]*"\})? [0-9.e+-]+$', l) for l in lines)
    check("/metrics: Prometheus text", ok, data[:500])
    m = srv.metrics()
    for name in ("memra_queue_depth", "memra_active_sequences", "memra_prompt_tokens_total",
                 "memra_batch_size_count", "memra_batch_size_sum", "memra_step_seconds_total",
                 "memra_generated_tokens_total", "memra_prefill_tokens_per_second", "memra_decode_tokens_per_second",
                 'memra_requests_total{status="200"}', 'memra_requests_total{status="400"}',
                 'memra_requests_total{status="404"}', 'memra_requests_total{status="413"}'):
        check("/metrics has %s > 0" % name if "total" in name or "second" in name else "/metrics has " + name,
              name in m and (m[name] > 0 or not ("total" in name or "second" in name)), m.get(name))


def second_server(exe, model):
    srv = Server(exe, model, "--parallel", "1", "--queue", "1", "-c", "2048", "--api-key", "sekrit")
    key = {"Authorization": "Bearer sekrit"}
    st, r = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
    check("api key: missing -> 401", st == 401 and is_error(r, st, "invalid_api_key"), (st, r))
    st, r = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 2}, headers={"Authorization": "Bearer no"})
    check("api key: wrong -> 401", st == 401, st)
    st, _, _ = srv.request("GET", "/health")
    check("api key: /health needs none", st == 200, st)
    st, r = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 2}, headers=key)
    check("api key: right -> 200", st == 200, (st, r))

    results = []
    lock = threading.Lock()

    def long_request():
        st, r = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 400, "temperature": 0}, headers=key)
        with lock:
            results.append((st, r))
    threads = [threading.Thread(target=long_request) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    n503 = [r for st, r in results if st == 503]
    n200 = [r for st, r in results if st == 200]
    check("queue full -> 503 queue_full (1 running + 1 queued fit)",
          len(n503) >= 1 and len(n200) >= 2 and len(n503) + len(n200) == 6 and
          all(is_error(r, 503, "queue_full") for r in n503), [(st, str(r)[:100]) for st, r in results])
    rc = srv.stop()
    check("SIGTERM: the server exits 0", rc == 0, (rc, "".join(srv.log[-5:])))


def main():
    exe, run_exe, model = sys.argv[1:4]
    if exe == "-":
        print("memra-server was not built (libmicrohttpd or jansson missing at configure time: "
              "apt-get install libmicrohttpd-dev libjansson-dev); skipping")
        return 77
    t0 = time.time()
    # a small prefill chunk: prompts run in several batched steps, mixed
    # with the decodes of the others (and the greedy text must still be
    # memra-run's, which prefills the prompt whole)
    srv = Server(exe, model, "--parallel", "8", "--queue", "64", "-c", "2048", "--max-body", "65536",
                 "--batch-prefill-chunk", "4")
    try:
        greedy = basic(srv, run_exe, model)
        bad_requests(srv)
        batched_exact(srv)
        concurrent(srv, greedy)
        slow_and_gone(srv)
        metrics(srv)
    finally:
        rc = srv.stop()
    check("SIGTERM: the server exits 0", rc == 0, (rc, "".join(srv.log[-5:])))
    second_server(exe, model)
    print("%d failure(s), %.1f s" % (failed, time.time() - t0))
    if failed:
        print("server log (last lines):\n" + "".join(srv.log[-40:]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
