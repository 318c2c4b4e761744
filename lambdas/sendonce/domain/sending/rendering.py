"""Per-recipient subject, HTML and text from a campaign's Jinja templates.

HTML is autoescaped, so a variable holding `<script>` arrives as text. A variable the
template uses but the recipient lacks is an error naming the variable, never an empty gap.
"""

from __future__ import annotations

from dataclasses import dataclass

from jinja2 import StrictUndefined, TemplateError, UndefinedError, meta
from jinja2.sandbox import SandboxedEnvironment

from sendonce.domain.models import Content, VariableValue

_HTML = SandboxedEnvironment(autoescape=True, undefined=StrictUndefined)
_PLAIN = SandboxedEnvironment(autoescape=False, undefined=StrictUndefined)


class RenderError(ValueError):
    pass


@dataclass(frozen=True)
class Rendered:
    subject: str
    html: str | None
    text: str | None


class CompiledContent:
    def __init__(self, content: Content):
        try:
            self._subject = _PLAIN.from_string(content.subject)
            self._html = _HTML.from_string(content.html) if content.html else None
            self._text = _PLAIN.from_string(content.text) if content.text else None
            sources = [(_PLAIN, content.subject), (_HTML, content.html), (_PLAIN, content.text)]
            # The names the templates read from a recipient's variables (not Jinja's own globals).
            variables = frozenset(
                name
                for env, source in sources
                if source
                for name in meta.find_undeclared_variables(env.parse(source))
                if name not in env.globals
            )
        except TemplateError as exc:
            raise RenderError(f"template does not compile: {exc}") from exc
        # An A/B campaign's variants, each compiled whole (campaigns/variants.py).
        self._variants = {v.id: CompiledContent(content.of_variant(v.id)) for v in content.variants}
        self.variables: frozenset[str] = variables.union(*(v.variables for v in self._variants.values()))

    def render(self, variables: dict[str, VariableValue], variant: str | None = None) -> Rendered:
        """The recipient's subject and bodies; `variant`: an A/B campaign's variant (RenderError
        for one the campaign does not have)."""
        if variant is not None:
            if variant not in self._variants:
                raise RenderError(f"the campaign has no variant {variant!r}")
            return self._variants[variant].render(variables)
        try:
            subject = self._subject.render(variables)
            html = self._html.render(variables) if self._html else None
            text = self._text.render(variables) if self._text else None
        except UndefinedError as exc:
            raise RenderError(f"template variable missing: {exc.message}") from exc
        except TemplateError as exc:
            raise RenderError(f"template failed: {exc}") from exc
        # A header cannot span lines; a variable must not be able to inject one.
        subject = " ".join(subject.splitlines()).strip()
        if not subject:
            raise RenderError("subject renders empty")
        return Rendered(subject=subject, html=html, text=text)


def check_content(content: Content) -> None:
    """Raise RenderError when a campaign's templates do not compile."""
    CompiledContent(content)
