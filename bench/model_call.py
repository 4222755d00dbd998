"""One model call's CPU, side by side: WorkTrain's adapter, two ways of using the SDK, the floor.

    .venv/bin/python bench/model_call.py [--rounds 5] [--calls 1.0] [--tool-kb 50] [--text-deltas 1000]
                                         [--history-kb 50,200,400]

Starts bench/sse_replay.py (a scripted Messages API replaying fixed SSE bytes on loopback,
in a process of its own) and measures, in this process, the CPU (`time.thread_time`) of one
model call made four ways:

- **worktrain**: `daemon.agent.model.AnthropicModel.complete`, the adapter of this tree
  (request built from a `ModelRequest`, sent, stream read into a `ModelReply`);
- **sdk stream**: `client.messages.stream(**body).get_final_message()`, the SDK's helper;
- **sdk create**: `client.messages.create(**body, stream=True)`, the SDK's event objects,
  accumulated by hand (text and tool input joined, the input parsed once at the end);
- **floor**: httpx (the SDK's own HTTP library) with the body `json.dumps`ed by hand, the
  lines parsed with `json`, accumulated the same way: what a call cannot cost less than in
  Python with these libraries.

Reply shapes (first table): short text + one small tool_use; a `--tool-kb` tool input (a
Write) in 10-character `input_json_delta`s; `--text-deltas` text deltas of 10 characters;
the same tool input in one delta (linearity). Request side (second table): the short reply
with a history of each `--history-kb` size, so the request's building and serializing
dominate; and whether the adapter's bytes are the SDK's bytes (or at least its JSON value).

Every variant's reply is checked equal to the others' once per shape before timing. Then
`--rounds` rounds, each making every shape's calls with every variant, the variants'
order rotated per round (interleaved: the machine's noise falls on all of them alike); the
figure is the median per call over all rounds, and the ratio to the floor's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sse_replay
from common import ROOT, Child, bench_env, machine_line, median, table

sys.path.insert(0, str(ROOT))

Summary = tuple[Any, ...]
Variant = Callable[[], Summary]
VARIANTS = ("worktrain", "sdk stream", "sdk create", "floor")
CALLS = {"small": 40, "tool": 3, "text": 10, "tool-one": 20}  # per variant and round, x --calls


def summarize(content: list[dict[str, Any]], stop_reason: Any, output_tokens: Any) -> Summary:
    """What every variant must agree on: the blocks, the stop reason, the output tokens."""
    blocks = tuple(
        ("text", b["text"])
        if b["type"] == "text"
        else ("tool_use", b["name"], json.dumps(b["input"], sort_keys=True))
        for b in content
    )
    return blocks, stop_reason, output_tokens


class Accumulator:
    """The hand-written accumulation of the `sdk create` and `floor` variants (dict events)."""

    def __init__(self) -> None:
        self.blocks: list[dict[str, Any]] = []
        self.parts: list[list[str]] = []
        self.stop_reason: Any = None
        self.output_tokens: Any = None

    def start(self, block: dict[str, Any]) -> None:
        self.blocks.append(dict(block))
        self.parts.append([])

    def stop(self, index: int) -> None:
        block, joined = self.blocks[index], "".join(self.parts[index])
        if block["type"] == "text":
            block["text"] = joined
        elif block["type"] == "tool_use" and joined:
            block["input"] = json.loads(joined)

    def summary(self) -> Summary:
        return summarize(self.blocks, self.stop_reason, self.output_tokens)


def floor_call(http: Any, url: str, headers: dict[str, str], body: dict[str, Any]) -> Summary:
    acc = Accumulator()
    content = json.dumps({**body, "stream": True}, ensure_ascii=False, separators=(",", ":")).encode()
    with http.stream("POST", url, content=content, headers=headers) as response:
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            kind = event["type"]
            if kind == "content_block_delta":
                delta = event["delta"]
                acc.parts[event["index"]].append(delta.get("text") or delta.get("partial_json") or "")
            elif kind == "content_block_start":
                acc.start(event["content_block"])
            elif kind == "content_block_stop":
                acc.stop(event["index"])
            elif kind == "message_delta":
                acc.stop_reason = event["delta"]["stop_reason"]
                acc.output_tokens = event["usage"]["output_tokens"]
    return acc.summary()


def sdk_create_call(client: Any, body: dict[str, Any]) -> Summary:
    acc = Accumulator()
    for event in client.messages.create(**body, stream=True):
        kind = event.type
        if kind == "content_block_delta":
            delta = event.delta
            text = delta.text if delta.type == "text_delta" else getattr(delta, "partial_json", "")
            acc.parts[event.index].append(text)
        elif kind == "content_block_start":
            acc.start(event.content_block.to_dict())
        elif kind == "content_block_stop":
            acc.stop(event.index)
        elif kind == "message_delta":
            acc.stop_reason = event.delta.stop_reason
            acc.output_tokens = event.usage.output_tokens
    return acc.summary()


def sdk_stream_call(client: Any, body: dict[str, Any]) -> Summary:
    with client.messages.stream(**body) as stream:
        message = stream.get_final_message().model_dump(mode="json")
    return summarize(message["content"], message["stop_reason"], message["usage"]["output_tokens"])


def worktrain_call(model: Any, request: Any) -> Summary:
    reply = model.complete(request)
    content = [block.model_dump(mode="json") for block in reply.content]
    return summarize(content, reply.stop_reason, reply.usage.output_tokens)


def history(kb: int) -> list[Any]:
    """A session's history of about `kb` KiB on the wire: Read calls and their results."""
    from daemon.turn.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock

    messages = [Message(role="user", content=(TextBlock(text="Start the step."),))]
    size, turn = 0, 0
    while size < kb * 1024:
        turn += 1
        use = ToolUseBlock(id=f"toolu_{turn:05d}", name="Read", input={"path": f"src/file_{turn}.py"})
        said = TextBlock(text=f"Turn {turn}: reading the next file, as the step asks.")
        result = ToolResultBlock(tool_use_id=use.id, content=f"# file {turn}\n" + "x = 1  # é\n" * 80)
        messages += [Message(role="assistant", content=(said, use)), Message(role="user", content=(result,))]
        size += len(json.dumps([m.wire() for m in messages[-2:]]))
    return messages


class Bench:
    """The clients and requests of one run, against the replay server at `url`."""

    def __init__(self, url: str) -> None:
        import anthropic
        import httpx2 as httpx

        from daemon.agent.model import AnthropicModel, make_client

        self.url = url
        self.client = make_client("bench-key", url)
        self.sdk = anthropic.Anthropic(api_key="bench-key", base_url=url, max_retries=0)
        self.http = httpx.Client(timeout=60.0)
        self.headers = {
            "x-api-key": "bench-key",
            "anthropic-version": "2023-06-01",
            "content-type": "application/json",
        }
        self.models = {shape: AnthropicModel(f"bench-{shape}", client=self.client) for shape in CALLS}

    def variants(self, shape: str, messages: list[Any]) -> dict[str, Variant]:
        from daemon.agent.model import ModelRequest, wire_request
        from daemon.tools import default_toolbox

        request = ModelRequest("You are a benchmark. " * 40, default_toolbox().specs(), messages)
        body = wire_request(request, f"bench-{shape}")
        model = self.models[shape]
        return {
            "worktrain": lambda: worktrain_call(model, request),
            "sdk stream": lambda: sdk_stream_call(self.sdk, body),
            "sdk create": lambda: sdk_create_call(self.sdk, body),
            "floor": lambda: floor_call(self.http, f"{self.url}/v1/messages", self.headers, body),
        }

    def sent_alike(self, shape: str, messages: list[Any]) -> str:
        """Whether the adapter sent the SDK's bytes: compares the replay's hashes of the two."""
        from daemon.agent.model import ModelRequest, wire_request
        from daemon.tools import default_toolbox

        request = ModelRequest("You are a benchmark. " * 40, default_toolbox().specs(), messages)
        hashes = []
        for send in ("adapter", "sdk"):
            seen: list[Any] = []

            def record(response: Any, seen: list[Any] = seen) -> None:
                seen.append(response.headers)

            client = self.client if send == "adapter" else self.sdk
            hooks = client._client.event_hooks["response"]  # the SDK's httpx client's own
            hooks.append(record)
            try:
                if send == "adapter":
                    self.models[shape].complete(request)
                else:
                    sdk_stream_call(self.sdk, wire_request(request, f"bench-{shape}"))
            finally:
                hooks.remove(record)
            hashes.append((seen[-1]["x-body-sha"], seen[-1]["x-value-sha"]))
        if hashes[0] == hashes[1]:
            return "same bytes"
        return "same JSON value" if hashes[0][1] == hashes[1][1] else "DIFFERENT JSON"


def measure(
    rows: dict[str, dict[str, Variant]], calls: dict[str, int], rounds: int
) -> dict[str, dict[str, list[float]]]:
    """CPU seconds per call, per row and variant, over interleaved rounds."""
    for row, variants in rows.items():  # every variant answers the same, once, before timing
        answers = {name: run() for name, run in variants.items()}
        if len(set(answers.values())) != 1:
            raise RuntimeError(f"{row}: the variants disagree: {answers}")
    times: dict[str, dict[str, list[float]]] = {row: {v: [] for v in VARIANTS} for row in rows}
    for round_no in range(rounds):
        order = VARIANTS[round_no % len(VARIANTS) :] + VARIANTS[: round_no % len(VARIANTS)]
        for row, variants in rows.items():
            for name in order:
                run = variants[name]
                for _ in range(calls[row]):
                    started = time.thread_time()
                    run()
                    times[row][name].append(time.thread_time() - started)
    return times


def render(times: dict[str, dict[str, list[float]]], labels: dict[str, str]) -> str:
    rows = []
    for row, by_variant in times.items():
        floor = median(by_variant["floor"])
        cells = [
            f"{median(by_variant[v]) * 1000:.2f} ms ({median(by_variant[v]) / floor:.1f}x)" for v in VARIANTS
        ]
        rows.append([labels[row], len(by_variant["floor"]), *cells])
    return table(["reply / request", "calls each", *VARIANTS], rows, right_from=1)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=float, default=1.0, help="scales the calls per round of each shape")
    parser.add_argument("--tool-kb", type=int, default=50)
    parser.add_argument("--text-deltas", type=int, default=1000)
    parser.add_argument("--history-kb", default="50,200,400")
    parser.add_argument(
        "--chunk", type=int, default=4096, help="the replay's HTTP chunk bytes; 0: one per event"
    )
    args = parser.parse_args(argv)
    log_dir = Path(tempfile.mkdtemp(prefix="wt-model-call-"))
    env = bench_env("redis://unused", log_dir)
    argv_server = [sys.executable, str(ROOT / "bench" / "sse_replay.py"), "--tool-kb", str(args.tool_kb)]
    argv_server += ["--chunk", str(args.chunk)]
    server = Child.spawn("sse-replay", [*argv_server, "--text-deltas", str(args.text_deltas)], env, log_dir)
    try:
        url = server.wait_for_line("replay listening on").split()[-1]
        bench = Bench(url)
        first = history(0)[:1]
        replies = {shape: bench.variants(shape, first) for shape in CALLS}
        calls = {shape: max(1, round(n * args.calls)) for shape, n in CALLS.items()}
        labels = {
            "small": "short text + one small tool_use",
            "tool": f"a {args.tool_kb} KB tool input in 10-character deltas",
            "text": f"{args.text_deltas:,} text deltas",
            "tool-one": f"the same {args.tool_kb} KB tool input in one delta",
        }
        wire = {
            shape: len(data) / 1024
            for shape, data in sse_replay.shapes(args.tool_kb, args.text_deltas).items()
        }
        labels = {shape: f"{label} ({wire[shape]:,.0f} KB of SSE)" for shape, label in labels.items()}
        reply_times = measure(replies, calls, args.rounds)
        sizes = [int(kb) for kb in args.history_kb.split(",") if kb]
        histories = {f"h{kb}": history(kb) for kb in sizes}
        requests = {row: bench.variants("small", messages) for row, messages in histories.items()}
        request_calls = {row: calls["small"] // 2 or 1 for row in requests}
        request_times = measure(requests, request_calls, args.rounds)
        alike = {f"h{kb}": bench.sent_alike("small", histories[f"h{kb}"]) for kb in sizes}
    finally:
        server.stop()
        shutil.rmtree(log_dir, ignore_errors=True)
    request_labels = {f"h{kb}": f"short reply, {kb} KB history ({alike[f'h{kb}']})" for kb in sizes}
    out = "\n\n".join(
        [
            machine_line(),
            f"CPU per call, median (x the floor); HTTP chunks of {args.chunk or 'one event'}"
            + (" bytes" if args.chunk else ""),
            render(reply_times, labels),
            render(request_times, request_labels),
        ]
    )
    print(out)
    return out


if __name__ == "__main__":
    main()
