"""The OpenAI request bodies the api takes, as pydantic models: the shared building blocks
(``fields``), the tools and tool choice (``tools``), the input items (``input_items``), the
bodies (``bodies``), and the one place their validation errors become OpenAI's
``param``/``code`` (``validation``).

Every object forbids unknown keys (``unknown_parameter``, as OpenAI answers them) and is strict
(no coercion: ``"1"`` is no integer, ``true`` no number). Input items, content parts, tools,
tool choices and formats are unions discriminated by their ``type`` (chat messages by their
``role``); a value of no known kind is refused naming that key. What the models cannot say
(a call's arguments nested past the shared JSON bound, a compaction made elsewhere, a JSON
Schema that is none) is said by validators that raise the OpenAI code itself as the error type.

The body reaches these models already parsed by ``items.json_object``, which bounds its nesting
(``common.json_limits``) and refuses values no later tier can hold.
"""
