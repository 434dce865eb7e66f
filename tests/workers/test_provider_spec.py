"""Model specs, the factory, pricing, the package surface and the function-backed test double."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import workers.providers as providers
from store import NewMessage, TextBlock, ToolUseBlock, Usage
from workers._protocol import Model, ModelRequest, ModelResponse
from workers.errors import BadModelResponse, ModelSpecError
from workers.providers import (
    FunctionModel,
    ModelSpec,
    OpenAIChatModel,
    ScriptedModel,
    cost_usd,
    make_model,
    parse_model_spec,
    price_for,
    text_response,
    tool_response,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("anthropic:claude-sonnet-4-5", ModelSpec("anthropic", "claude-sonnet-4-5")),
        (
            "anthropic:claude-sonnet-4-5-20250929",
            ModelSpec("anthropic", "claude-sonnet-4-5-20250929"),
        ),
        (
            "openai:llama3.1:8b@http://localhost:11434/v1",
            ModelSpec("openai", "llama3.1:8b", base_url="http://localhost:11434/v1"),
        ),
        (
            "openai:org@team/model@https://gw.example/v1",
            ModelSpec("openai", "org@team/model", base_url="https://gw.example/v1"),
        ),
        ("scripted:demo/script.json", ModelSpec("scripted", "scripted", path="demo/script.json")),
        (
            "scripted:C:/with:colon.json",
            ModelSpec("scripted", "scripted", path="C:/with:colon.json"),
        ),
    ],
)
def test_good_specs_parse_and_print_back(spec: str, parsed: ModelSpec) -> None:
    assert parse_model_spec(spec) == parsed
    assert str(parsed) == spec


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "claude-sonnet-4-5",
        "anthropic:",
        "anthropic:has space",
        "openai:gpt-4o",
        "openai:gpt-4o@localhost:8000",
        "openai:@http://localhost:8000/v1",
        "scripted:",
        "gemini:pro",
    ],
)
def test_bad_specs_are_one_line_errors_naming_spec_and_forms(spec: str) -> None:
    with pytest.raises(ModelSpecError) as info:
        parse_model_spec(spec)
    message = str(info.value)
    assert "\n" not in message
    assert repr(spec) in message
    assert "anthropic:MODEL, openai:MODEL@BASE_URL or scripted:PATH" in message


def test_make_model_builds_each_provider(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text('{"rules": []}')
    scripted = make_model(f"scripted:{script}", timeout=5, max_retries=1)  # ignored
    assert isinstance(scripted, ScriptedModel)
    openai = make_model("openai:m@http://127.0.0.1:1/v1", max_retries=0)
    assert isinstance(openai, OpenAIChatModel)
    anthropic_model = make_model("anthropic:claude-haiku-4-5", api_key="k")
    assert anthropic_model.spec == "anthropic:claude-haiku-4-5"
    for model in (scripted, openai, anthropic_model):
        assert isinstance(model, Model)


def test_make_model_for_anthropic_without_key_is_a_configuration_error() -> None:
    with pytest.raises(ModelSpecError, match="set ANTHROPIC_API_KEY"):
        make_model("anthropic:claude-haiku-4-5")


def test_importing_providers_does_not_import_the_anthropic_sdk(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text('{"rules": []}')
    code = (
        "import sys, workers.providers as p\n"
        "assert 'anthropic' not in sys.modules, 'imported at package import'\n"
        f"p.make_model('scripted:{script}')\n"
        "p.make_model('openai:m@http://127.0.0.1:1')\n"
        "assert 'anthropic' not in sys.modules, 'imported for a non-anthropic spec'\n"
    )  # (that an anthropic spec does load it is covered in-process: the import takes seconds)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_all_is_sorted_and_every_name_resolves() -> None:
    def isort_style(name: str) -> tuple[int, str]:  # ruff RUF022: CONSTANTS, Classes, functions
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert providers.__all__ == sorted(providers.__all__, key=isort_style)
    for name in providers.__all__:
        assert getattr(providers, name) is not None
    with pytest.raises(AttributeError):
        getattr(providers, "NoSuchThing")  # noqa: B009


# --- pricing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "input_price", "output_price"),
    [
        ("claude-opus-4-5", 5.0, 25.0),
        ("claude-opus-4-1-20250805", 15.0, 75.0),
        ("claude-sonnet-4-5-20250929", 3.0, 15.0),
        ("claude-sonnet-4-0", 3.0, 15.0),
        ("claude-haiku-4-5", 1.0, 5.0),
        ("claude-3-5-haiku-latest", 0.8, 4.0),
        ("anthropic:claude-haiku-4-5", 1.0, 5.0),
    ],
)
def test_known_models_are_priced(model: str, input_price: float, output_price: float) -> None:
    price = price_for(model)
    assert price is not None
    assert (price.input, price.output) == (input_price, output_price)


def test_cost_counts_cache_writes_at_125_and_reads_at_10_percent() -> None:
    usage = Usage(
        input_tokens=1_000_000,
        output_tokens=1_000_000,
        cache_creation_input_tokens=1_000_000,
        cache_read_input_tokens=1_000_000,
    )
    assert cost_usd("claude-sonnet-4-5", usage) == pytest.approx(3 + 15 + 3.75 + 0.3)


@pytest.mark.parametrize("model", ["llama3.1:8b", "scripted", "claude-opus-4-6", "claude-next"])
def test_unknown_and_local_models_cost_nothing(model: str) -> None:
    assert cost_usd(model, Usage(input_tokens=10**6, output_tokens=10**6)) == 0.0


# --- FunctionModel ------------------------------------------------------------------------------


def _request(text: str = "hi") -> ModelRequest:
    return ModelRequest(system="", tools=[], messages=[NewMessage.user(text)])


async def test_function_model_calls_sync_and_async_functions_and_records_requests() -> None:
    def echo(request: ModelRequest) -> ModelResponse:
        return text_response(request.messages[-1].text.upper())

    async def later(request: ModelRequest) -> ModelResponse:
        return text_response("async", usage=Usage(output_tokens=3))

    sync_model = FunctionModel(echo)
    assert (await sync_model.complete(_request("hey"))).content == [TextBlock(text="HEY")]
    assert sync_model.spec == "function:echo"
    assert [r.messages[-1].text for r in sync_model.requests] == ["hey"]
    async_model = FunctionModel(later, name="slow")
    reply = await async_model.complete(_request())
    assert (reply.content, reply.usage.output_tokens) == ([TextBlock(text="async")], 3)
    assert async_model.spec == "function:slow"
    assert async_model.cost_usd(Usage(input_tokens=10**6)) == 0.0
    await async_model.aclose()
    assert async_model.closed


async def test_function_model_refuses_a_result_that_is_not_a_response() -> None:
    model = FunctionModel(lambda request: "text")  # type: ignore[arg-type,return-value]
    with pytest.raises(BadModelResponse, match="not a ModelResponse"):
        await model.complete(_request())


def test_tool_response_builds_calls_with_fresh_ids() -> None:
    ready = ToolUseBlock(id="toolu_given", name="bash", input={"command": "ls"})
    reply = tool_response(("read_file", {"path": "a"}), ("read_file", {"path": "a"}), ready)
    calls = [b for b in reply.content if isinstance(b, ToolUseBlock)]
    assert reply.stop_reason == "tool_use"
    assert len({c.id for c in calls}) == 3
    assert calls[2] == ready
    with_text = tool_response(("bash", {}), text="Running.")
    assert with_text.content[0] == TextBlock(text="Running.")
    with pytest.raises(ValueError, match="at least one"):
        tool_response()
