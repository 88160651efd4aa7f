"""A site's settings (``exporter.catalogue.settings``) in force while rules and dashboards are
built.

The rule and dashboard modules read their thresholds from ``exporter.catalogue.thresholds``
when they build (never at import), so a generation applies a settings file by giving the
settable constants its values for that generation only (``applied``): one table of defaults,
and every module follows it without a parameter threaded through.

The Helm chart cannot run Python, so its copy of the rules is built once with placeholders
(``placeholders``): a settable number is a ``Token``, which writes itself as ``⟦key⟧`` (or
``⟦key|.0%⟧``, ``⟦key|.0f⟧``, ``⟦key|gib⟧`` for the forms a description prints) and refuses
arithmetic, so a threshold used in a way the chart cannot reproduce fails the generation
instead of leaving the default behind; a settable duration or selector is the text ``⟦key⟧``.
The chart's PrometheusRule template replaces each placeholder with the value from
``prometheusRule.thresholds`` / ``.selectors`` (``templates/_settings.tpl``), and
``tests/deploy/test_chart_settings.py`` checks that the chart and this generator give the same
rules for the same settings.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from exporter.boundedyaml import YamlLimitError, load_bounded
from exporter.catalogue import settings as catalogue
from exporter.catalogue import thresholds
from exporter.catalogue.settings import TOKEN_CLOSE, TOKEN_OPEN, Prices, Settings, SettingsError

__all__ = ["FORMATS", "Token", "applied", "chart_dashboards", "current", "is_placeholder",
           "load", "placeholders", "token"]

#: The forms a settable number is printed in: PromQL number (""), percent, whole number, GiB.
FORMATS = ("", ".0%", ".0f", "gib")


def token(key: str, form: str = "") -> str:
    """The placeholder text of setting ``key`` printed in ``form``."""
    return f"{TOKEN_OPEN}{key}{'|' + form if form else ''}{TOKEN_CLOSE}"


class Token(float):
    """A settable number while the chart's rules are built: prints as its placeholder and
    refuses arithmetic (its float value is the default, which nothing may use)."""

    key: str

    def __new__(cls, value: float, key: str) -> Token:
        made = super().__new__(cls, value)
        made.key = key
        return made

    def __format__(self, spec: str) -> str:
        if spec not in FORMATS:
            raise TypeError(f"setting {self.key}: the chart cannot print the format {spec!r}")
        return token(self.key, spec)

    def __str__(self) -> str:
        return token(self.key)

    __repr__ = __str__

    def _refuse(self, *_: Any) -> NoReturn:
        raise TypeError(f"setting {self.key} is used in arithmetic; the chart cannot follow it "
                        "(print it with promql.num or a format of settings.FORMATS)")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _refuse
    __pow__ = __rpow__ = __neg__ = __abs__ = __float__ = __int__ = __round__ = _refuse
    __lt__ = __le__ = __gt__ = __ge__ = _refuse


@contextmanager
def _bound(values: dict[str, Any]) -> Iterator[None]:
    """The constants of ``thresholds`` named in ``values`` bound to them, then restored."""
    saved = {name: getattr(thresholds, name) for name in values}
    try:
        for name, value in values.items():
            setattr(thresholds, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(thresholds, name, value)


#: The settings of the generation under way (the innermost ``applied``); the defaults else.
_CURRENT: list[Settings] = [Settings()]


def current() -> Settings:
    """The settings in force: what the dashboards read their prices from."""
    return _CURRENT[-1]


def is_placeholder(text: str) -> bool:
    """Whether ``text`` is a placeholder (the chart's copy is being built)."""
    return text.startswith(TOKEN_OPEN)


@contextmanager
def _current(site: Settings) -> Iterator[None]:
    _CURRENT.append(site)
    try:
        yield
    finally:
        _CURRENT.pop()


@contextmanager
def applied(site: Settings) -> Iterator[None]:
    """Build with ``site``'s values in force (the defaults for what it leaves out)."""
    with _bound(dict(site.values)), _current(site):
        yield


@contextmanager
def chart_dashboards() -> Iterator[None]:
    """Build the chart's dashboards: the currency as its placeholder (the chart's dashboards
    template fills it in); thresholds at their defaults (the chart's values set the rules)."""
    with _current(Settings(prices=Prices(token("currency")))):
        yield


@contextmanager
def placeholders() -> Iterator[None]:
    """Build the chart's copy: every setting as its placeholder."""
    values: dict[str, Any] = {}
    for setting in catalogue.SETTINGS:
        default = setting.default
        values[setting.constant] = (Token(float(default), setting.key)
                                    if setting.kind.numeric else token(setting.key))
    with _bound(values):
        yield


def load(path: Path) -> Settings:
    """The settings file at ``path``.

    Raises:
        SettingsError: unreadable, not YAML within bounds, or wrong (one line naming the file).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{path}: cannot read it ({getattr(exc, 'strerror', None) or exc})"
                            ) from None
    try:
        doc = load_bounded(text)
    except YamlLimitError as exc:
        raise SettingsError(f"{path}: {exc}") from None
    try:
        return catalogue.parse(doc)
    except SettingsError as exc:
        raise SettingsError(f"{path}: {exc}") from None
