"""The text view of a page: visible text and every interactive element, each tagged with a numeric id.

One script runs in the page. It stamps each interactive element with `data-envhub-id` (kept while the page
lives, so ids are stable across steps on the same page), and returns the view's lines plus the position
of every element that has a DOM `id` (for the oracle; the agent never sees DOM ids).
"""

from __future__ import annotations

from typing import Any

from playwright.async_api import Page

from envhub_browser.site import Element

OBSERVE_JS = r"""
() => {
  const INTERACTIVE = 'a[href],button,input,select,textarea,canvas,[role=button],[role=link],' +
    '[role=checkbox],[role=slider],[role=tab],[onclick],[tabindex]:not([tabindex="-1"])';
  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD', 'OPTION']);
  let next = window.__envhub_next || 1;
  const lines = [];
  const elements = {};
  const vw = window.innerWidth, vh = window.innerHeight;
  const clean = s => (s || '').replace(/\s+/g, ' ').trim();
  const shown = el => {
    const style = getComputedStyle(el);
    if (style.display === 'none' || style.visibility === 'hidden') return false;
    const r = el.getBoundingClientRect();
    return r.width > 0 || r.height > 0 || style.display === 'contents';
  };
  const blockOf = node => {
    let el = node.nodeType === 1 ? node : node.parentElement;
    while (el && getComputedStyle(el).display.startsWith('inline')) el = el.parentElement;
    return el;
  };
  const roleOf = el => {
    const role = el.getAttribute('role');
    if (role) return role;
    const tag = el.tagName;
    if (tag === 'A') return 'link';
    if (tag === 'BUTTON') return 'button';
    if (tag === 'SELECT') return 'combobox';
    if (tag === 'TEXTAREA') return 'textbox';
    if (tag === 'CANVAS') return 'canvas';
    if (tag === 'INPUT') {
      const types = {checkbox: 'checkbox', radio: 'radio', submit: 'button', button: 'button',
                     reset: 'button', range: 'slider', date: 'date', password: 'password'};
      return types[el.type] || 'textbox';
    }
    return 'clickable';
  };
  // a label's own words, without the text of the control it wraps (a dropdown's options, say)
  const labelOf = el => el.labels && el.labels.length
    ? [...el.labels[0].childNodes].filter(n => n.nodeType === 3).map(n => n.textContent).join(' ') : '';
  const nameOf = el => clean(el.getAttribute('aria-label') || labelOf(el)
    || (['submit', 'button', 'reset'].includes(el.type) && el.value)
    || (!['INPUT', 'SELECT', 'TEXTAREA'].includes(el.tagName) && el.innerText)
    || el.getAttribute('placeholder') || el.getAttribute('title') || el.getAttribute('name') || '')
    .slice(0, 80);
  const describe = (el, id) => {
    const role = roleOf(el);
    let line = `[${id}] ${role} "${nameOf(el)}"`;
    if (role === 'textbox' || role === 'date') line += ` value="${clean(el.value).slice(0, 80)}"`;
    if (role === 'password') line += el.value ? ' (filled)' : ' (empty)';
    if (role === 'checkbox' || role === 'radio') {
      const on = el.tagName === 'INPUT' ? el.checked : el.getAttribute('aria-checked') === 'true';
      line += on ? ' checked' : ' unchecked';
    }
    if (role === 'combobox' && el.options) {
      const picked = el.selectedIndex >= 0 ? el.options[el.selectedIndex].text : '';
      line += ` selected="${clean(picked)}" options: ${[...el.options].map(o => clean(o.text)).join(' | ')}`;
    }
    if (role === 'slider') line += ` value=${el.getAttribute('aria-valuenow') ?? el.value}`;
    if (role === 'tab' && el.getAttribute('aria-selected') === 'true') line += ' selected';
    const r = el.getBoundingClientRect();
    if (r.bottom < 0 || r.top > vh || r.right < 0 || r.left > vw) line += ' (off-screen)';
    return line;
  };
  let row = null;  // table cells of the row being read, joined into one line
  const emit = (text, block) => {
    if (row) { row[row.length - 1].push(text); return; }
    const last = lines[lines.length - 1];
    if (block && last && last.block === block) last.text += ' ' + text;
    else lines.push({text, block});
  };
  const walk = node => {
    for (const child of node.childNodes) {
      if (child.nodeType === 3) {
        const text = clean(child.textContent);
        const parent = child.parentElement;
        if (text && !(parent && parent.tagName === 'LABEL' && parent.control)) emit(text, blockOf(child));
        continue;
      }
      if (child.nodeType !== 1 || SKIP.has(child.tagName) || !shown(child)) continue;
      const el = child;
      if (el.matches(INTERACTIVE)) {
        let id = el.getAttribute('data-envhub-id');
        if (!id) { id = String(next++); el.setAttribute('data-envhub-id', id); }
        emit(describe(el, id), null);
        if (!['DIV', 'SPAN', 'LI', 'TD'].includes(el.tagName) || el.getAttribute('role')) continue;
      }
      if (/^H[1-6]$/.test(el.tagName)) {
        emit('#'.repeat(Number(el.tagName[1])) + ' ' + clean(el.innerText), null);
        continue;
      }
      if (el.tagName === 'TR') {
        const outer = row; row = [];
        for (const cell of el.cells) { row.push([]); walk(cell); }
        const text = '| ' + row.map(parts => parts.join(' ')).join(' | ') + ' |';
        row = outer;
        emit(text, null);
        continue;
      }
      walk(el);
    }
  };
  walk(document.body);
  for (const el of document.querySelectorAll('[id]')) {
    const r = el.getBoundingClientRect();
    const eid = Number(el.getAttribute('data-envhub-id') || 0);
    elements[el.id] = {eid, x: r.x, y: r.y, width: r.width, height: r.height};
  }
  window.__envhub_next = next;
  const header = [`url: ${location.pathname}${location.search}`, `title: ${document.title}`];
  const height = document.documentElement.scrollHeight;
  if (height > vh) header.push(`scrolled: ${Math.round(window.scrollY)} of ${height - vh} px`);
  return {text: [...header, ...lines.map(l => l.text)].join('\n'), elements};
}
"""


async def observe(page: Page, max_chars: int) -> tuple[str, dict[str, Element]]:
    """The page's text view (cut to `max_chars`) and its elements with DOM ids."""
    result: dict[str, Any] = await page.evaluate(OBSERVE_JS)
    text: str = result["text"]
    if len(text) > max_chars:
        text = text[:max_chars] + "\n[... the rest of the text view is cut off]"
    elements = {key: Element(**value) for key, value in result["elements"].items()}
    return text, elements
