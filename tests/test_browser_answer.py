"""Chapter 12 opens with its answer: in a 1400×1000 window, the image workload's weakest link and its
remedy (the first action: its chapter's link and setting) sit within the first 1,000 px of the page's
content (the workload is named by the model that ran: ResNet-50 on a GPU, a small CNN in a CPU run)."""
import pytest
from test_browser import _open, book_html, browser, server  # noqa: F401  (the built book served, and headless chromium)

pytestmark = pytest.mark.browser

#: How far down the content the answer may start and end, at this window size.
WINDOW, FIRST_SCREEN = {"width": 1400, "height": 1000}, 1000

_POSITIONS = """() => {
  const main = document.querySelector('article.bd-article, main, article');
  const top = main.getBoundingClientRect().top + window.scrollY;
  const items = Array.from(main.querySelectorAll('li')).filter(li => li.getBoundingClientRect().height > 0);
  const find = (pred) => { const el = items.find(pred); if (!el) return null;
    const r = el.getBoundingClientRect(); return [r.top + window.scrollY - top, r.bottom + window.scrollY - top]; };
  return {
    weakest: find(li => / training on a (GPU|CPU)/.test(li.textContent) && li.textContent.includes('weakest link')),
    remedy: find(li => /^\\s*chapter \\d+/.test(li.textContent) && li.querySelector('a[href$=".html"]')),
  };
}"""


def answer_positions(page_) -> dict:
    """The image workload's weakest-link and remedy bullets: [top, bottom] in px below the content's top."""
    return page_.evaluate(_POSITIONS)


def test_chapter_12_answers_in_the_first_screen(server, browser):  # noqa: F811
    page_, _, _ = _open(browser, f"{server}/notebooks/12_conclusion.html", WINDOW)
    pos = answer_positions(page_)
    assert pos["weakest"] is not None, "no weakest-link sentence for the image workload"
    assert pos["remedy"] is not None, "no remedy (chapter link and setting) for the image workload"
    assert pos["weakest"][1] <= FIRST_SCREEN and pos["remedy"][1] <= FIRST_SCREEN, pos
    page_.close()
