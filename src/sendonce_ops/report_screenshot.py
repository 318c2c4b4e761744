"""`python -m sendonce_ops.report_screenshot PAGE.html --out docs/img/report.png`: a campaign
report page (`sendonce campaign report`) as a PNG, as headless Chromium draws it.

The README's screenshot is made this way (`make report-screenshot`: `sendonce demo --report`,
then this). The A/B one (docs/img/report-ab.png) is the page of the A/B acceptance test's
campaign, which tests/integration/test_ab_end_to_end.py writes when SENDONCE_AB_REPORT names
a file (`make report-screenshot-ab`). Chromium is Debian's (`apt-get install chromium`, as
for the report's browser test), driven by Playwright from the dev requirements; the page is
opened from disk and must fetch nothing. The PNG is reduced to a 256-colour palette (the
page is flat colours and text), which keeps it small enough to commit.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import click

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-sync"]
CHARTS = 5  # timeline, outcomes, duplicates, feedback, unknowns (report_page.py)


class ScreenshotError(Exception):
    pass


def screenshot(page_path: Path, out: Path, *, width: int = 1200, browser: Any = None) -> int:
    """Write `page_path`'s full-page screenshot to `out`; its size in bytes. `browser`: a
    Playwright browser already running (the tests' session one), else Debian's Chromium."""
    if browser is None:
        if not CHROMIUM.exists():
            raise ScreenshotError(f"{CHROMIUM} is missing (Debian: apt-get install chromium)")
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
            try:
                return screenshot(page_path, out, width=width, browser=launched)
            finally:
                launched.close()
    from PIL import Image

    fetched: list[str] = []
    errors: list[str] = []
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        page.on("request", lambda r: fetched.append(r.url))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_path.resolve().as_uri())
        page.wait_for_function(f"document.querySelectorAll('.main-svg').length >= {CHARTS}", timeout=60_000)
        png = page.screenshot(full_page=True, animations="disabled")
    finally:
        context.close()
    if errors or fetched != [page_path.resolve().as_uri()]:
        raise ScreenshotError(f"{page_path}: page errors {errors}, requests {fetched}")
    image = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    out.parent.mkdir(parents=True, exist_ok=True)
    image.save(out, format="PNG", optimize=True)
    return out.stat().st_size


@click.command()
@click.argument("page", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("docs/img/report.png"))
@click.option("--width", type=click.IntRange(800, 2000), default=1200, show_default=True, help="Viewport width (px).")
def main(page: Path, out: Path, width: int) -> None:
    """Screenshot a report page written by `sendonce campaign report`."""
    try:
        size = screenshot(page, out, width=width)
    except ScreenshotError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"{out}: {size:,} bytes")


if __name__ == "__main__":
    main()
