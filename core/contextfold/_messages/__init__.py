"""Messages: the frozen model, OpenAI and Anthropic conversion, the format rules
(validation and repair) and the structure of a history (groups, turns, tool loops)."""
