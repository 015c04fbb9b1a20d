"""
The provider a model name implies, for rows that name no provider.

A call's provider is where it was served, in LiteLLM's vocabulary (``openai``, ``azure``,
``anthropic``, ``bedrock``, ``gemini``, ``vertex_ai``, ``groq``, ...): the same model can be
served by several. A model name alone is taken to mean its maker's own API only where that is
the usual reading (``gpt-4o`` → ``openai``, ``claude-3-5-sonnet`` → ``anthropic``), or where
the name's form belongs to one platform (Bedrock's ``anthropic.claude-…`` ids, Vertex's
``claude-…@date``). Open-weight families (Llama, Qwen, Gemma, Mixtral, Phi, gpt-oss, DeepSeek's
distills) are served by anyone, so they give ``unknown``; so does a name with an Ollama-style
``:tag`` or a namespace that is not a provider (``meta-llama/…``, ``Qwen/…``).

A ``prefix/`` the way LiteLLM writes it names the provider: a platform prefix (``azure/``,
``bedrock/``, ``groq/``, ``openrouter/``, ...) is the provider whatever the model; a maker
prefix (``openai/``, ``anthropic/``, ``gemini/``, ...) counts only when the rest of the name
is that maker's own model (LiteLLM also writes ``openai/`` for any OpenAI-compatible server,
e.g. ``openai/Qwen2.5-7B`` served by vLLM, which gives ``unknown``).
"""

from __future__ import annotations


def _literal(value: str) -> str:
    # Not _sql.literal: _sql imports this module.
    return "'" + value.replace("'", "''") + "'"


UNKNOWN_PROVIDER = "unknown"
"""The provider of a call whose model name does not say where it was served."""

# (SQL condition over the lower-cased name ``{m}``, provider or None for unknown), first match
# wins: the exceptions come before the families they would otherwise fall in.
_NAME_RULES: tuple[tuple[str, str | None], ...] = (
    ("{m} LIKE 'ft:gpt%'", "openai"),  # OpenAI fine-tunes: ft:gpt-4o-mini:org::id
    (
        r"regexp_matches({m}, '^((us|eu|apac|global)\.)?"
        r"(anthropic|meta|amazon|cohere|mistral|ai21|deepseek|writer|qwen)\.')",
        "bedrock",
    ),
    ("contains({m}, ':')", None),  # llama3:8b, qwen2.5:7b (Ollama tags): served locally
    ("{m} LIKE 'claude%@%'", "vertex_ai"),  # claude-3-5-sonnet@20240620
    ("regexp_matches({m}, '^gpt-?(oss|j|neo|2)')", None),  # open weights
    ("regexp_matches({m}, '^(gpt-|chatgpt-|o[134](-|$)|codex-|computer-use)')", "openai"),
    (
        "regexp_matches({m}, '^(text-embedding-(3|ada)|davinci-|babbage-|whisper-|tts-|"
        "dall-e-|(omni|text)-moderation)')",
        "openai",
    ),
    ("{m} LIKE 'claude%'", "anthropic"),
    ("{m} LIKE 'gemini%'", "gemini"),
    (
        "regexp_matches({m}, '^(mistral-(large|medium|small|tiny|saba|embed|ocr)|open-mistral|"
        "open-mixtral|codestral|pixtral|ministral|magistral|devstral)')",
        "mistral",
    ),
    ("regexp_matches({m}, '^(command($|-)|embed-(english|multilingual)|rerank-)')", "cohere"),
    ("{m} LIKE 'deepseek-r1-distill%'", None),  # open-weight distills, served by many
    ("{m} LIKE 'deepseek-%'", "deepseek"),
    ("{m} LIKE 'grok%'", "xai"),
)
"""Name → provider for a name without a ``prefix/``; no match gives ``unknown``."""

MAKER_PREFIXES: dict[str, str] = {
    "openai": "openai", "anthropic": "anthropic", "gemini": "gemini", "mistral": "mistral",
    "cohere": "cohere", "cohere_chat": "cohere", "deepseek": "deepseek", "xai": "xai",
}  # fmt: skip
"""LiteLLM prefixes that name a model's maker: they count when the rest is its model."""

PLATFORM_PREFIXES: frozenset[str] = frozenset(
    {"azure", "azure_ai", "bedrock", "vertex_ai", "vertex_ai_beta", "groq", "together_ai",
     "fireworks_ai", "openrouter", "deepinfra", "perplexity", "anyscale", "ollama",
     "ollama_chat", "hosted_vllm", "vllm", "huggingface", "replicate", "sagemaker",
     "databricks", "watsonx", "cerebras", "sambanova", "nvidia_nim", "cloudflare", "ai21",
     "nebius", "novita", "lm_studio", "friendliai", "baseten", "predibase", "clarifai"}
)  # fmt: skip
"""LiteLLM prefixes that name where a call was served, whatever the model."""


def _by_name(m: str) -> str:
    whens = " ".join(
        f"WHEN {cond.format(m=m)} THEN {_literal(provider or UNKNOWN_PROVIDER)}"
        for cond, provider in _NAME_RULES
    )
    return f"CASE {whens} ELSE {_literal(UNKNOWN_PROVIDER)} END"


def infer_provider_sql(model: str) -> str:
    """
    SQL for the provider a model name implies (see the module docstring), never NULL.

    Args:
        model: SQL for the model name (text; NULL gives ``unknown``).

    Returns:
        An SQL expression yielding a provider name or ``'unknown'``.
    """
    m = f"lower(trim({model}))"
    prefix = f"split_part({m}, '/', 1)"
    rest = f"substr({m}, strpos({m}, '/') + 1)"
    platforms = ", ".join(_literal(p) for p in sorted(PLATFORM_PREFIXES))
    maker = (
        f"CASE {prefix} "
        + " ".join(f"WHEN {_literal(p)} THEN {_literal(v)}" for p, v in MAKER_PREFIXES.items())
        + " END"
    )
    unknown = _literal(UNKNOWN_PROVIDER)
    # A maker prefix counts when the rest names that maker's model; any other prefix is a
    # namespace (meta-llama/, Qwen/), which says nothing about where the call was served.
    return (
        f"CASE WHEN {model} IS NULL THEN {unknown} "
        f"WHEN NOT contains({m}, '/') THEN {_by_name(m)} "
        f"WHEN {prefix} IN ({platforms}) THEN {prefix} "
        f"WHEN {_by_name(rest)} = {maker} THEN {maker} ELSE {unknown} END"
    )
