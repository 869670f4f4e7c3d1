"""The language-model assistant: drafts intents, proposes typed intent patches, explains and reviews plans.

The model never writes a plan, a manifest or a number. It fills typed proposals (`IntentDraft`, `IntentPatch`)
that go through the same validation and solving as a user's own edit, and its prose is checked against the
plan's facts. Everything here works against any OpenAI-compatible endpoint, and the features that can work
without one (explain, review's slash commands) do.

Only `infra.cli` and `infra.api` import this package, lazily, so planning never loads the `openai` client.
It never imports them back: the `check` and `plan` it solves proposals with are handed in (`planning.Planning`).
"""
