"""The web tasks: each draws a small site from a seed, says how success shows, and plans the oracle.

Difficulty 1 needs one or two actions on one page, 2 several actions or a non-obvious widget, 3 several
pages or remembering something across them. Add a task by writing a function `(rng) -> Site` and marking
it `@task(name, difficulty)`; the tests then run its oracle in a real browser.
"""

from __future__ import annotations

import calendar
import json
import random
from collections.abc import Callable
from dataclasses import dataclass

from envhub_browser.site import Element, Outcome, Request, Response, Site, Step, document, esc

WORDS = [
    "amber", "basil", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "jasper", "kelp",
    "lumen", "maple", "nectar", "onyx", "pepper", "quartz", "raven", "saffron", "tundra", "umber", "velvet",
    "willow", "yarrow", "zephyr",
]  # fmt: skip
FIRST = ["Ada", "Bruno", "Chen", "Dara", "Elif", "Femi", "Greta", "Hugo", "Ines", "Jonas", "Kira", "Luca"]
LAST = ["Ahn", "Berg", "Costa", "Diaz", "Eze", "Fox", "Gupta", "Hall", "Ivanov", "Jung", "Khan", "Lund"]
CITIES = ["Oslo", "Lima", "Pune", "Perth", "Quito", "Riga", "Turin", "Accra", "Lyon", "Cork"]
PRODUCTS = [
    "Blue Kettle", "Red Kettle", "Steel Pan", "Oak Chair", "Pine Chair", "Wool Rug", "Glass Vase",
    "Desk Lamp", "Floor Lamp", "Linen Sheet", "Clay Pot", "Copper Mug", "Paper Notebook", "Brass Clock",
    "Cotton Towel",
]  # fmt: skip


@dataclass(frozen=True)
class WebTask:
    name: str
    difficulty: int
    build: Callable[[random.Random], Site]

    @property
    def description(self) -> str:
        return (self.build.__doc__ or "").strip().splitlines()[0]


TASKS: dict[str, WebTask] = {}


def task(
    name: str, difficulty: int
) -> Callable[[Callable[[random.Random], Site]], Callable[[random.Random], Site]]:
    def register(build: Callable[[random.Random], Site]) -> Callable[[random.Random], Site]:
        TASKS[name] = WebTask(name, difficulty, build)
        return build

    return register


# Oracle steps; `#id` names an element by its DOM id, resolved to the agent's element id at play time.
def click(dom: str) -> Step:
    return ("click", {"element": f"#{dom}"})


def fill(dom: str, text: str) -> Step:
    return ("type", {"element": f"#{dom}", "text": text})


def choose(dom: str, option: str) -> Step:
    return ("select", {"element": f"#{dom}", "option": option})


def click_at(dom: str, dx: float | None = None, dy: float | None = None) -> Step:
    """Click inside element `dom` at offset (dx, dy) from its top left corner; its centre by default."""

    def at(elements: dict[str, Element]) -> tuple[str, dict[str, object]]:
        box = elements[dom]
        x = box.x + (box.width / 2 if dx is None else dx)
        y = box.y + (box.height / 2 if dy is None else dy)
        return ("click_at", {"x": round(x), "y": round(y)})

    return at


def records(key: str, value: object) -> str:
    """An `onclick` attribute that records `value` under `key` in the page state (and follows no link)."""
    return f'onclick="{esc(f"record({json.dumps(key)}, {json.dumps(value)}); return false")}"'


def submitted(outcome: Outcome) -> dict[str, object]:
    value = outcome.state.get("submitted")
    return value if isinstance(value, dict) else {}


def form(fields: str, button: str = "Submit") -> str:
    return (
        f"<form onsubmit='return submitForm(this)'>{fields}"
        f"<div><button id='submit' type='submit'>{esc(button)}</button></div><p class='status'></p></form>"
    )


# --- difficulty 1 -------------------------------------------------------------------------------------


@task("click-button", 1)
def click_button(rng: random.Random) -> Site:
    """Click the button with a given label among several."""
    labels = rng.sample(WORDS, rng.randint(3, 6))
    target = rng.randrange(len(labels))
    buttons = "".join(
        f"<button id='b{i}' {records('clicked', label)}>{esc(label.title())}</button>"
        for i, label in enumerate(labels)
    )
    return Site(
        goal=f"Click the button labelled '{labels[target].title()}'.",
        pages={"/": document("Buttons", f"<h2>Buttons</h2><div>{buttons}</div>")},
        check=lambda o: o.state.get("clicked") == labels[target],
        oracle=[click(f"b{target}")],
    )


@task("click-link", 1)
def click_link(rng: random.Random) -> Site:
    """Follow the link with a given text."""
    names = rng.sample(WORDS, 5)
    target = rng.choice(names)
    links = "".join(f"<li><a id='l-{n}' href='/p/{n}'>{n.title()} page</a></li>" for n in names)
    pages: dict[str, str | Callable[[Request], Response | str]] = {
        "/": document("Links", f"<h2>Links</h2><ul>{links}</ul>")
    }
    for n in names:
        pages[f"/p/{n}"] = document(n.title(), f"<h2>The {n} page</h2><p>Nothing else to see.</p>")
    return Site(
        goal=f"Open the {target.title()} page.",
        pages=pages,
        check=lambda o: o.path == f"/p/{target}",
        oracle=[click(f"l-{target}")],
    )


@task("enter-text", 1)
def enter_text(rng: random.Random) -> Site:
    """Type a given word into a text field and submit."""
    word = rng.choice(WORDS) + str(rng.randint(10, 99))
    body = form("<label>Text <input id='text' name='text'></label>")
    return Site(
        goal=f"Enter '{word}' into the text field and press Submit.",
        pages={"/": document("Enter text", f"<h2>Enter text</h2>{body}")},
        check=lambda o: submitted(o).get("text") == word,
        oracle=[fill("text", word), click("submit")],
    )


@task("choose-radio", 1)
def choose_radio(rng: random.Random) -> Site:
    """Pick a radio button by its label and submit."""
    options = rng.sample(WORDS, 4)
    target = rng.randrange(4)
    radios = "".join(
        f"<div><label><input type='radio' id='r{i}' name='choice' value='{o}'>{o.title()}</label></div>"
        for i, o in enumerate(options)
    )
    return Site(
        goal=f"Choose '{options[target].title()}' and press Submit.",
        pages={"/": document("Choose", f"<h2>Choose one</h2>{form(radios)}")},
        check=lambda o: submitted(o).get("choice") == options[target],
        oracle=[click(f"r{target}"), click("submit")],
    )


@task("select-dropdown", 1)
def select_dropdown(rng: random.Random) -> Site:
    """Pick an option from a dropdown and submit."""
    options = rng.sample(CITIES, 6)
    target = rng.choice(options[1:])
    menu = "".join(f"<option>{c}</option>" for c in options)
    body = form(f"<label>City <select id='city' name='city'>{menu}</select></label>")
    return Site(
        goal=f"Select {target} from the City dropdown and press Submit.",
        pages={"/": document("Dropdown", f"<h2>Where to?</h2>{body}")},
        check=lambda o: submitted(o).get("city") == target,
        oracle=[choose("city", target), click("submit")],
    )


@task("press-key", 1)
def press_key(rng: random.Random) -> Site:
    """Press a named key on the keyboard."""
    key = rng.choice(["Enter", "Escape", "ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "F2", "Delete"])
    script = "document.addEventListener('keydown', e => { record('key', e.key); "
    script += "document.getElementById('last').textContent = e.key; });"
    body = "<h2>Keyboard</h2><p>Last key pressed: <span id='last'>none</span></p>"
    return Site(
        goal=f"Press the {key} key.",
        pages={"/": document("Keyboard", body, script)},
        check=lambda o: o.state.get("key") == key,
        oracle=[("press", {"key": key})],
    )


@task("read-value", 1)
def read_value(rng: random.Random) -> Site:
    """Report a value shown on the page."""
    order = f"{rng.choice('ABCDEFGH')}{rng.randint(10000, 99999)}"
    decoys = [f"{rng.choice('KLMN')}{rng.randint(10000, 99999)}" for _ in range(2)]
    body = (
        f"<h2>Your order</h2><p>Tracking reference: {decoys[0]}</p><p>Order number: <b>{order}</b></p>"
        f"<p>Customer number: {decoys[1]}</p>"
    )
    return Site(
        goal="What is the order number shown on the page? Answer with done(answer=...).",
        pages={"/": document("Order", body)},
        check=lambda o: o.answer.strip().upper() == order,
        oracle=[],
        answer=order,
    )


@task("scroll-to-button", 1)
def scroll_to_button(rng: random.Random) -> Site:
    """Scroll down a long page to a button below the fold and click it."""
    paragraphs = "".join(f"<p>{' '.join(rng.choices(WORDS, k=40))}.</p>" for _ in range(12))
    label = rng.choice(["Confirm", "Accept", "Continue", "Finish"])
    body = (
        f"<h2>Terms</h2>{paragraphs}"
        f"<button id='decoy' onclick='record(\"clicked\", \"decoy\")'>Decline</button>"
        f"<button id='go' onclick='record(\"clicked\", \"go\")'>{label}</button>"
    )
    return Site(
        goal=f"Scroll to the end of the terms and click '{label}'.",
        pages={"/": document("Terms", body)},
        check=lambda o: o.state.get("clicked") == "go",
        oracle=[("scroll", {"direction": "down", "amount": 5000}), click("go")],
    )


# --- difficulty 2 -------------------------------------------------------------------------------------


@task("click-checkboxes", 2)
def click_checkboxes(rng: random.Random) -> Site:
    """Tick exactly the named checkboxes and submit."""
    items = rng.sample(WORDS, rng.randint(5, 7))
    chosen = sorted(rng.sample(items, rng.randint(1, 3)))
    boxes = "".join(
        f"<div><label><input type='checkbox' id='c-{w}' name='items' value='{w}'>{w}</label></div>"
        for w in items
    )
    listed = ", ".join(chosen)
    return Site(
        goal=f"Tick exactly these boxes: {listed}. Then press Submit.",
        pages={"/": document("Checkboxes", f"<h2>Pick items</h2>{form(boxes)}")},
        check=lambda o: sorted(_as_list(submitted(o).get("items"))) == chosen,
        oracle=[*(click(f"c-{w}") for w in chosen), click("submit")],
    )


def _as_list(value: object) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


@task("fill-form", 2)
def fill_form(rng: random.Random) -> Site:
    """Fill a form's name, email and age fields and submit."""
    first, last = rng.choice(FIRST), rng.choice(LAST)
    want = {
        "name": f"{first} {last}",
        "email": f"{first.lower()}.{last.lower()}@example.org",
        "age": str(rng.randint(18, 90)),
    }
    fields = "".join(
        f"<div><label>{k.title()} <input id='{k}' name='{k}'></label></div>" for k in ("name", "email", "age")
    )
    return Site(
        goal=f"Fill in the form with name '{want['name']}', email '{want['email']}' and age {want['age']}, "
        "then submit it.",
        pages={"/": document("Sign up", f"<h2>Sign up</h2>{form(fields)}")},
        check=lambda o: {k: submitted(o).get(k) for k in want} == want,
        oracle=[*(fill(k, v) for k, v in want.items()), click("submit")],
    )


@task("enter-date", 2)
def enter_date(rng: random.Random) -> Site:
    """Enter a date into a date field and submit."""
    year, month, day = rng.randint(2020, 2030), rng.randint(1, 12), rng.randint(1, 28)
    iso = f"{year}-{month:02d}-{day:02d}"
    body = form("<label>Date <input type='date' id='date' name='date'></label>", "Book")
    return Site(
        goal=f"Book the {day} {calendar.month_name[month]} {year}: enter it in the date field, press Book.",
        pages={"/": document("Booking", f"<h2>Booking</h2>{body}")},
        check=lambda o: submitted(o).get("date") == iso,
        oracle=[fill("date", iso), click("submit")],
    )


@task("toggle-settings", 2)
def toggle_settings(rng: random.Random) -> Site:
    """Switch settings on and off as asked, then save."""
    names = rng.sample(
        ["Email alerts", "Dark mode", "Autosave", "Sounds", "Two-factor login", "Newsletter"], 4
    )
    start = {n: rng.random() < 0.5 for n in names}
    want = {n: rng.random() < 0.5 for n in names}
    if want == start:
        want[names[0]] = not start[names[0]]
    boxes = "".join(
        f"<div><label><input type='checkbox' id='s{i}' name='on' value='{n}'{' checked' if start[n] else ''}>"
        f"{n}</label></div>"
        for i, n in enumerate(names)
    )
    on = sorted(n for n in names if want[n])
    off = sorted(n for n in names if not want[n])
    return Site(
        goal=f"Make sure these settings are on: {', '.join(on) or 'none'}; and these are off: "
        f"{', '.join(off) or 'none'}. Then press Save.",
        pages={"/": document("Settings", f"<h2>Settings</h2>{form(boxes, 'Save')}")},
        check=lambda o: sorted(_as_list(submitted(o).get("on"))) == on,
        oracle=[*(click(f"s{i}") for i, n in enumerate(names) if start[n] != want[n]), click("submit")],
    )


@task("open-tab", 2)
def open_tab(rng: random.Random) -> Site:
    """Open a tab by name and press the button inside it."""
    tabs = rng.sample(["Profile", "Billing", "Security", "Team", "Usage"], 3)
    target = rng.randrange(3)
    heads = "".join(
        f"<span role='tab' id='t{i}' aria-selected='{str(i == 0).lower()}' onclick='show({i})' "
        f"style='margin-right:14px;cursor:pointer;border-bottom:2px solid #999'>{t}</span>"
        for i, t in enumerate(tabs)
    )
    panels = "".join(
        f"<div id='p{i}' style='display:{'block' if i == 0 else 'none'};margin-top:10px'><p>{t} options.</p>"
        f"<button id='a{i}' {records('activated', t)}>Activate {t.lower()}</button></div>"
        for i, t in enumerate(tabs)
    )
    script = (
        "function show(k) { for (let i = 0; i < 3; i++) { document.getElementById('p' + i).style.display = "
        "i === k ? 'block' : 'none'; "
        "document.getElementById('t' + i).setAttribute('aria-selected', i === k); } }"
    )
    steps: list[Step] = [click(f"a{target}")] if target == 0 else [click(f"t{target}"), click(f"a{target}")]
    return Site(
        goal=f"Open the {tabs[target]} tab and press its Activate button.",
        pages={"/": document("Account", f"<h2>Account</h2><div>{heads}</div>{panels}", script)},
        check=lambda o: o.state.get("activated") == tabs[target],
        oracle=steps,
    )


@task("drag-slider", 2)
def drag_slider(rng: random.Random) -> Site:
    """Drag a slider's knob to a given value (0 to 100 across a 300-pixel track)."""
    start, want = rng.randrange(0, 101, 5), rng.randrange(0, 101, 5)
    while want == start:
        want = rng.randrange(0, 101, 5)
    body = (
        "<h2>Volume</h2><div id='track' role='slider' aria-label='Volume' aria-valuemin='0' "
        "aria-valuemax='100' "
        f"aria-valuenow='{start}' tabindex='0' style='position:relative;width:300px;height:24px;"
        "background:#ddd;border-radius:12px;margin:20px 10px;touch-action:none'>"
        "<div id='knob' style='position:absolute;top:-3px;width:30px;height:30px;margin-left:-15px;"
        "border-radius:15px;background:#36c'></div></div><p>Volume: <span id='value'></span></p>"
        "<button id='save' onclick='record(\"saved\", volume)'>Save</button>"
    )
    script = f"""
    let volume = {start}; const track = document.getElementById('track');
    function set(v) {{ volume = Math.max(0, Math.min(100, Math.round(v))); record('value', volume);
      track.setAttribute('aria-valuenow', volume);
      document.getElementById('knob').style.left = (volume * 3) + 'px';
      document.getElementById('value').textContent = volume; }}
    const at = e => (e.clientX - track.getBoundingClientRect().left) / 3;
    let dragging = false;
    track.addEventListener('pointerdown', e => {{ dragging = true; set(at(e)); }});
    document.addEventListener('pointermove', e => {{ if (dragging) set(at(e)); }});
    document.addEventListener('pointerup', () => {{ dragging = false; }});
    track.addEventListener('keydown', e => {{ if (e.key === 'ArrowRight') set(volume + 1);
      if (e.key === 'ArrowLeft') set(volume - 1); }});
    set(volume);"""

    def drag(elements: dict[str, Element]) -> tuple[str, dict[str, object]]:
        knob, track = elements["knob"].centre, elements["track"]
        return (
            "drag",
            {"from_x": knob[0], "from_y": knob[1], "to_x": round(track.x + want * 3), "to_y": knob[1]},
        )

    return Site(
        goal=f"Set the volume slider to {want}, then press Save.",
        pages={"/": document("Volume", body, script)},
        check=lambda o: o.state.get("saved") == want,
        oracle=[drag, click("save")],
    )


@task("click-shape", 2)
def click_shape(rng: random.Random) -> Site:
    """Click a shape drawn on a canvas, where only coordinates work."""
    colours = ["red", "green", "blue", "orange", "purple"]
    spots = rng.sample([(c, r) for c in range(5) for r in range(3)], 5)
    shapes = [(80 * c + 40, 70 * r + 35, colour) for (c, r), colour in zip(spots, colours, strict=True)]
    target = rng.choice(colours)
    draw = "".join(
        f"g.fillStyle='{colour}'; g.beginPath(); g.arc({x},{y},22,0,7); g.fill();" for x, y, colour in shapes
    )
    script = f"""
    const canvas = document.getElementById('board'); const g = canvas.getContext('2d'); {draw}
    const shapes = {[[x, y, c] for x, y, c in shapes]};
    canvas.addEventListener('click', e => {{ const r = canvas.getBoundingClientRect();
      const hit = shapes.find(([x, y]) => Math.hypot(e.clientX - r.left - x, e.clientY - r.top - y) <= 22);
      record('clicked', hit ? hit[2] : 'nothing'); }});"""
    tx, ty, _ = next(s for s in shapes if s[2] == target)
    return Site(
        goal=f"Click the {target} circle in the picture.",
        pages={
            "/": document(
                "Canvas",
                "<h2>Shapes</h2><canvas id='board' width='400' height='210' "
                "style='border:1px solid #999'></canvas>",
                script,
            )
        },
        check=lambda o: o.state.get("clicked") == target,
        oracle=[click_at("board", tx + 1, ty + 1)],  # + the canvas's 1-pixel border
    )


@task("find-in-table", 2)
def find_in_table(rng: random.Random) -> Site:
    """Report one cell of a table, found by its row's name."""
    people = rng.sample([f"{f} {last}" for f in FIRST for last in LAST], rng.randint(6, 9))
    ages = {p: rng.randint(20, 70) for p in people}
    cities = {p: rng.choice(CITIES) for p in people}
    target = rng.choice(people)
    rows = "".join(f"<tr><td>{p}</td><td>{cities[p]}</td><td>{ages[p]}</td></tr>" for p in people)
    table = f"<table><tr><th>Name</th><th>City</th><th>Age</th></tr>{rows}</table>"
    return Site(
        goal=f"How old is {target}, according to the table? Answer with done(answer=...).",
        pages={"/": document("People", f"<h2>People</h2>{table}")},
        check=lambda o: o.answer.strip() == str(ages[target]),
        oracle=[],
        answer=str(ages[target]),
    )


@task("count-in-table", 2)
def count_in_table(rng: random.Random) -> Site:
    """Count the rows of a table that match a condition."""
    statuses = ["shipped", "pending", "cancelled"]
    orders = [(f"#{rng.randint(1000, 9999)}", rng.choice(statuses)) for _ in range(rng.randint(7, 12))]
    wanted = rng.choice(statuses)
    count = sum(1 for _, s in orders if s == wanted)
    rows = "".join(f"<tr><td>{o}</td><td>{s}</td></tr>" for o, s in orders)
    return Site(
        goal=f"How many orders in the table are {wanted}? Answer with done(answer=...).",
        pages={
            "/": document(
                "Orders", f"<h2>Orders</h2><table><tr><th>Order</th><th>Status</th></tr>{rows}</table>"
            )
        },
        check=lambda o: o.answer.strip() == str(count),
        oracle=[],
        answer=str(count),
    )


@task("click-cheapest", 2)
def click_cheapest(rng: random.Random) -> Site:
    """Press the Buy button in the row of the cheapest product."""
    products = rng.sample(PRODUCTS, 5)
    prices = dict(zip(products, rng.sample(range(5, 200), 5), strict=True))
    cheapest = min(products, key=prices.__getitem__)
    rows = "".join(
        f"<tr><td>{p}</td><td>${prices[p]}</td><td><button id='buy{i}' {records('bought', p)}>Buy"
        "</button></td></tr>"
        for i, p in enumerate(products)
    )
    return Site(
        goal="Buy the cheapest product: press the Buy button in its row.",
        pages={"/": document("Shop", f"<h2>Shop</h2><table>{rows}</table>")},
        check=lambda o: o.state.get("bought") == cheapest,
        oracle=[click(f"buy{products.index(cheapest)}")],
    )


@task("copy-text", 2)
def copy_text(rng: random.Random) -> Site:
    """Copy a sentence shown on the page into a text area and submit."""
    sentence = " ".join(rng.sample(WORDS, 6)).capitalize() + "."
    body = f"<h2>Copy</h2><blockquote id='quote'>{sentence}</blockquote>" + form(
        "<label>Your copy <textarea id='copy' name='copy' rows='2' cols='50'></textarea></label>"
    )
    return Site(
        goal="Copy the quoted sentence exactly into the text area, then press Submit.",
        pages={"/": document("Copy", body)},
        check=lambda o: str(submitted(o).get("copy", "")).strip() == sentence,
        oracle=[fill("copy", sentence), click("submit")],
    )


@task("login", 2)
def login(rng: random.Random) -> Site:
    """Log in with the given username and password; the server checks them and sets a session cookie."""
    user = rng.choice(FIRST).lower() + str(rng.randint(1, 99))
    password = "".join(rng.choices("abcdefghkmnpqrstuvwxyz23456789", k=10))
    session = f"{rng.getrandbits(64):016x}"
    login_form = (
        "<form method='post' action='/login'><div><label>Username <input id='user' name='user'></label></div>"
        "<div><label>Password <input id='password' type='password' name='password'></label></div>"
        "<button id='login' type='submit'>Log in</button></form>"
    )

    def login_page(request: Request) -> Response | str:
        if request.method == "POST":
            if request.form.get("user") == user and request.form.get("password") == password:
                cookie = f"session={session}; Path=/; HttpOnly; SameSite=Strict"
                return Response("", status=303, headers={"Location": "/account", "Set-Cookie": cookie})
            message = "<p style='color:#a00'>Wrong username or password.</p>"
            return document("Log in", f"<h2>Log in</h2>{message}{login_form}")
        return document("Log in", f"<h2>Log in</h2>{login_form}")

    def account(request: Request) -> Response | str:
        if request.cookies.get("session") != session:
            return document("Account", "<h2>Please log in</h2><a id='to-login' href='/login'>Log in</a>")
        return document("Account", f"<h2>Welcome, {user}</h2>", state={"logged_in": user})

    return Site(
        goal=f"Log in as '{user}' with the password '{password}'.",
        pages={
            "/": document("Home", "<h2>Home</h2><a id='to-login' href='/login'>Log in</a>"),
            "/login": login_page,
            "/account": account,
        },
        check=lambda o: o.state.get("logged_in") == user and o.path == "/account",
        oracle=[click("to-login"), fill("user", user), fill("password", password), click("login")],
    )


# --- difficulty 3 -------------------------------------------------------------------------------------


@task("navigate-site", 3)
def navigate_site(rng: random.Random) -> Site:
    """Reach a page two levels deep in a small department store site."""
    departments = rng.sample(["garden", "kitchen", "toys", "books", "music", "sports"], 3)
    sections = ["hours", "contact", "offers"]
    pages: dict[str, str | Callable[[Request], Response | str]] = {}
    nav = "".join(f"<a id='d-{d}' href='/dept/{d}'>{d.title()}</a>" for d in departments)
    pages["/"] = document("Store", f"<nav>{nav}</nav><h2>Welcome to the store</h2>")
    for d in departments:
        links = "".join(f"<li><a id='s-{s}' href='/dept/{d}/{s}'>{s.title()}</a></li>" for s in sections)
        pages[f"/dept/{d}"] = document(d.title(), f"<nav>{nav}</nav><h2>{d.title()}</h2><ul>{links}</ul>")
        for s in sections:
            pages[f"/dept/{d}/{s}"] = document(
                f"{d.title()} {s}", f"<nav>{nav}</nav><h2>{d.title()}: {s}</h2>"
            )
    dept, section = rng.choice(departments), rng.choice(sections)
    return Site(
        goal=f"Go to the {section.title()} page of the {dept.title()} department.",
        pages=pages,
        check=lambda o: o.path == f"/dept/{dept}/{section}",
        oracle=[click(f"d-{dept}"), click(f"s-{section}")],
    )


@task("search-open", 3)
def search_open(rng: random.Random) -> Site:
    """Search a catalogue and open the matching result."""
    catalogue = {i + 1: p for i, p in enumerate(rng.sample(PRODUCTS, len(PRODUCTS)))}
    target = rng.choice(sorted(catalogue))
    search_form = "<form action='/search'><input id='q' name='q' placeholder='Search products'>"
    search_form += "<button id='go' type='submit'>Search</button></form>"

    def results(request: Request) -> str:
        query = request.query.get("q", "").strip().lower()
        hits = [(i, p) for i, p in catalogue.items() if query and any(w in p.lower() for w in query.split())]
        items = "".join(f"<li><a id='r{i}' href='/item/{i}'>{esc(p)}</a></li>" for i, p in hits)
        return document(
            "Results", f"{search_form}<h2>Results for {esc(query)}</h2><ul>{items or 'No results'}</ul>"
        )

    pages: dict[str, str | Callable[[Request], Response | str]] = {
        "/": document("Catalogue", f"<h2>Catalogue</h2>{search_form}"),
        "/search": results,
    }
    for i, p in catalogue.items():
        pages[f"/item/{i}"] = document(p, f"<h2>{p}</h2><p>In stock.</p>", state={"opened": i})
    return Site(
        goal=f"Search the catalogue for '{catalogue[target]}' and open its product page.",
        pages=pages,
        check=lambda o: o.state.get("opened") == target,
        oracle=[fill("q", catalogue[target]), ("press", {"key": "Enter"}), click(f"r{target}")],
    )


@task("go-back", 3)
def go_back(rng: random.Random) -> Site:
    """Read a code on another page, come back, and enter it into the form."""
    code = f"{rng.choice(WORDS)}-{rng.randint(100, 999)}"
    body = "<h2>Activate</h2><p>Your activation code is on the "
    body += "<a id='details' href='/details'>details page</a>.</p>"
    body += form("<label>Code <input id='code' name='code'></label>", "Activate")
    return Site(
        goal="Activate the account: find the activation code, then enter it on the first page and press "
        "Activate.",
        pages={
            "/": document("Activate", body),
            "/details": document("Details", f"<h2>Details</h2><p>Activation code: <b>{code}</b></p>"),
        },
        check=lambda o: submitted(o).get("code") == code and o.path == "/",
        oracle=[click("details"), ("back", {}), fill("code", code), click("submit")],
    )


@task("paginated-list", 3)
def paginated_list(rng: random.Random) -> Site:
    """Page through a list with Next links to find an item and select it."""
    names = rng.sample([f"{f} {last}" for f in FIRST for last in LAST], 15)
    target_index = rng.randrange(5, 15)

    def listing(request: Request) -> str:
        raw = request.query.get("page", "1")
        page = min(max(int(raw), 1), 3) if raw.isdigit() else 1
        rows = "".join(
            f"<li><a id='n{i}' href='#' {records('picked', n)}>{n}</a></li>"
            for i, n in enumerate(names)
            if (page - 1) * 5 <= i < page * 5
        )
        nav = f"<a id='next' href='/list?page={page + 1}'>Next</a>" if page < 3 else ""
        prev = f"<a id='prev' href='/list?page={page - 1}'>Previous</a> " if page > 1 else ""
        return document("Directory", f"<h2>Directory, page {page} of 3</h2><ul>{rows}</ul>{prev}{nav}")

    return Site(
        goal=f"Find {names[target_index]} in the directory and click their name.",
        pages={"/list": listing},
        start="/list",
        check=lambda o: o.state.get("picked") == names[target_index],
        oracle=[*(click("next") for _ in range(target_index // 5)), click(f"n{target_index}")],
    )


@task("wizard", 3)
def wizard(rng: random.Random) -> Site:
    """Complete a three-step form: a name, a plan, and agreeing to terms."""
    name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    plans = ["Basic", "Plus", "Pro", "Team"]
    plan = rng.choice(plans[1:])
    options = "".join(f"<option>{p}</option>" for p in plans)
    body = (
        "<form onsubmit='return submitForm(this)'>"
        "<div id='step1'><h3>Step 1 of 3</h3><label>Full name <input id='name' name='name'></label>"
        "<button id='next1' type='button' onclick='go(2)'>Next</button></div>"
        "<div id='step2' style='display:none'><h3>Step 2 of 3</h3>"
        f"<label>Plan <select id='plan' name='plan'>{options}</select></label>"
        "<button id='next2' type='button' onclick='go(3)'>Next</button></div>"
        "<div id='step3' style='display:none'><h3>Step 3 of 3</h3>"
        "<label><input type='checkbox' id='agree' name='agree' value='yes'>I agree to the terms</label>"
        "<button id='submit' type='submit'>Finish</button></div><p class='status'></p></form>"
    )
    script = (
        "function go(k) { for (const i of [1, 2, 3]) document.getElementById('step' + i).style.display = "
    )
    script += "i === k ? 'block' : 'none'; }"
    want = {"name": name, "plan": plan, "agree": "yes"}
    return Site(
        goal=f"Sign up as '{name}' on the {plan} plan, agreeing to the terms.",
        pages={"/": document("Sign up", f"<h2>Sign up</h2>{body}", script)},
        check=lambda o: {k: submitted(o).get(k) for k in want} == want,
        oracle=[
            fill("name", name),
            click("next1"),
            choose("plan", plan),
            click("next2"),
            click("agree"),
            click("submit"),
        ],
    )


@task("read-email", 3)
def read_email(rng: random.Random) -> Site:
    """Open the email from a given sender in an inbox and report the meeting room it names."""
    senders = rng.sample([f"{f} {last}" for f in FIRST for last in LAST], 5)
    rooms = {s: f"{rng.choice(['Room', 'Hall', 'Lab'])} {rng.randint(100, 499)}" for s in senders}
    subjects = {s: rng.choice(["Meeting", "Catch-up", "Review", "Planning"]) for s in senders}
    sender = rng.choice(senders)
    rows = "".join(
        f"<tr><td>{s}</td><td><a id='m{i}' href='/mail/{i}'>{subjects[s]}</a></td></tr>"
        for i, s in enumerate(senders)
    )
    pages: dict[str, str | Callable[[Request], Response | str]] = {
        "/": document("Inbox", f"<h2>Inbox</h2><table><tr><th>From</th><th>Subject</th></tr>{rows}</table>")
    }
    for i, s in enumerate(senders):
        pages[f"/mail/{i}"] = document(
            subjects[s],
            f"<h2>{subjects[s]}</h2><p>From: {s}</p><p>Hi, let's meet in {rooms[s]} at 10.</p>"
            "<a href='/'>Back to inbox</a>",
        )
    return Site(
        goal=f"In which room does {sender} want to meet? Read their email and answer with done(answer=...).",
        pages=pages,
        check=lambda o: o.answer.strip().lower() == rooms[sender].lower(),
        oracle=[click(f"m{senders.index(sender)}")],
        answer=rooms[sender],
    )
