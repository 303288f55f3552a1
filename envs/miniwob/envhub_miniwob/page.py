"""What the scripted solutions read: the utterance, its fields and the visible elements of the task area.

Read in one script after each observation (so interactive elements carry the `[n]` ids of the text view)
and kept as plain data, so a solution is a pure function of it and can be unit-tested without a browser.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any

from miniwob.fields import get_field_extractor  # type: ignore[import-untyped]

SNAPSHOT_JS = r"""
() => {
  const clean = s => (s || '').replace(/\s+/g, ' ').trim();
  const nodes = [];
  const HUD = '#reward-display, #click-canvas, #sync-task-cover, script, style';
  for (const el of document.body.querySelectorAll('*')) {
    if (el.closest(HUD)) continue;  // core.js's own display, not the task
    const r = el.getBoundingClientRect();
    const style = getComputedStyle(el);
    const hidden = style.visibility === 'hidden' || style.display === 'none';
    if (r.width === 0 || r.height === 0 || hidden) continue;
    const own = [...el.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent).join(' ');
    nodes.push({
      tag: el.tagName.toLowerCase(), id: el.id || '', classes: el.getAttribute('class') || '',
      text: clean(el.innerText ?? el.textContent), own: clean(own),
      value: typeof el.value === 'string' ? el.value : '', checked: el.checked === true,
      type: el.getAttribute('type') || '', name: el.getAttribute('name') || '',
      eid: Number(el.getAttribute('data-envhub-id') || 0),
      x: r.x, y: r.y, w: r.width, h: r.height,
      background: style.backgroundColor, fill: el.getAttribute('fill') || '',
      data: Object.assign({}, el.dataset),
    });
  }
  const said = core.getUtterance();
  return {utterance: typeof said === 'string' ? said : said.utterance,
          fields: typeof said === 'string' ? null : said.fields, nodes};
}
"""


@dataclass(frozen=True)
class Node:
    """One visible element of the task area, with its box in viewport pixels."""

    tag: str
    id: str
    classes: str
    text: str
    """innerText: the element's text with its descendants'."""
    own: str
    """Only the text directly inside the element."""
    value: str
    checked: bool
    type: str
    name: str
    eid: int
    """The `[n]` id of the text view, 0 when the text view does not list the element."""
    x: float
    y: float
    w: float
    h: float
    background: str
    fill: str
    data: dict[str, str]

    @property
    def centre(self) -> tuple[int, int]:
        return round(self.x + self.w / 2), round(self.y + self.h / 2)

    def has_class(self, name: str) -> bool:
        return name in self.classes.split()


@dataclass(frozen=True)
class Snapshot:
    """The page as the scripted solution sees it: the utterance, miniwob's fields for it, the elements."""

    utterance: str
    fields: dict[str, str]
    nodes: list[Node]
    step: int = 0
    """How many actions the agent has taken in this episode, for tasks whose page does not show progress."""

    @classmethod
    def read(cls, task: str, data: dict[str, Any], step: int = 0) -> Snapshot:
        """From `SNAPSHOT_JS`'s result; fields come from the page or else from miniwob's field extractor,
        as miniwob's `SeleniumInstance.get_observation` takes them."""
        utterance = str(data["utterance"])
        given = data.get("fields")
        fields = {str(k): str(v) for k, v in given.items()} if isinstance(given, dict) else {}
        if not isinstance(given, dict):
            with contextlib.suppress(KeyError, ValueError):  # no extractor, or one the utterance defeats
                fields = {str(k): str(v) for k, v in get_field_extractor(task)(utterance)}
        return cls(utterance, fields, [Node(**node) for node in data["nodes"]], step)

    def find(self, tag: str | None = None, *, text: str | None = None, cls: str | None = None) -> list[Node]:
        """Elements by tag, exact text (innerText) and class, in document order."""
        return [
            n
            for n in self.nodes
            if (tag is None or n.tag == tag)
            and (text is None or n.text == text)
            and (cls is None or n.has_class(cls))
        ]

    def one(self, tag: str | None = None, *, text: str | None = None, cls: str | None = None) -> Node:
        found = self.find(tag, text=text, cls=cls)
        if not found:
            raise LookupError(f"no {tag or 'element'} with text={text!r} cls={cls!r} on the page")
        return found[0]

    def by_id(self, dom_id: str) -> Node:
        for node in self.nodes:
            if node.id == dom_id:
                return node
        raise LookupError(f"no element #{dom_id} on the page")

    def quoted(self) -> list[str]:
        """The utterance's quoted parts, in order."""
        return re.findall(r'"([^"]*)"', self.utterance)
