"""`toolchain infer`: send one prompt to a served model; the answer streams to stdout."""

from __future__ import annotations

from typing import Annotated

import typer

from toolchain.cli.options import BenchProtocol, JsonOpt, ServedModelOpt, timeout_opt


def infer(
    prompt: Annotated[str, typer.Argument(help="The prompt text")],
    url: Annotated[
        str, typer.Option("--url", help="Triton gRPC host:port, or http://host:port (OpenAI)")
    ] = "127.0.0.1:8001",
    protocol: Annotated[
        BenchProtocol, typer.Option("--protocol", help="Triton gRPC streaming, or the OpenAI API")
    ] = BenchProtocol.triton,
    model: ServedModelOpt = "ensemble",
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Tokens to generate")] = 64,
    stream: Annotated[bool, typer.Option("--stream/--no-stream")] = True,
    timeout: Annotated[float, timeout_opt("the answer")] = 120.0,
    json_out: JsonOpt = False,
) -> None:
    """Send one prompt and print the answer as it streams; timing on stderr.

    Examples:
      toolchain infer "What is TensorRT-LLM?" --url 127.0.0.1:18001
      toolchain infer "Hello" --url http://127.0.0.1:8000 --protocol openai-chat --model llama
    """
    import sys
    from dataclasses import asdict

    from toolchain.bench.infer import infer as run_infer
    from toolchain.cli.render import err, print_json

    def show(piece: str) -> None:
        if not json_out:
            sys.stdout.write(piece)
            sys.stdout.flush()

    res = run_infer(
        protocol.value, url, model, prompt, max_tokens=max_tokens, stream=stream, timeout=timeout, on_text=show
    )
    if json_out:
        print_json(asdict(res))
        return
    sys.stdout.write("\n")
    ttft = "-" if res.ttft_ms is None else f"{res.ttft_ms:.1f}"
    e2e = "-" if res.e2e_ms is None else f"{res.e2e_ms:.1f}"
    tokens = res.output_tokens if res.output_tokens is not None else f"? ({res.token_source})"
    err.print(f"TTFT {ttft} ms, E2E {e2e} ms, {tokens} output tokens", highlight=False, markup=False)
    if res.stand_in:
        err.print(f"served by the {res.stand_in}", highlight=False, markup=False)
    if "\ufffd" in res.text:
        err.print(
            "note: � marks tokens whose bytes form no UTF-8 character (what a model with random weights, "
            "like the tiny spec's, emits)",
            highlight=False,
            markup=False,
        )


def register(app: typer.Typer) -> None:
    app.command()(infer)
