// oncebox console: parts of a page that refresh themselves without a reload.
// An element with data-live="URL" and data-every="seconds" is fetched again from URL
// (an HTML fragment of the console holding an element of the same id) every so many
// seconds, and put in place; never while the tab is hidden (and at once when it is
// shown again). Without the script the page is a plain page: reload it to refresh.
"use strict";
(function () {
  const parts = [...document.querySelectorAll("[data-live][id]")];
  if (!parts.length) return;
  const stopped = new Set();

  async function refresh(id) {
    const part = document.getElementById(id);
    if (!part || stopped.has(id) || document.hidden) return;
    let answer;
    try {
      answer = await fetch(part.dataset.live, {
        credentials: "same-origin", headers: { Accept: "text/html" }, cache: "no-store",
      });
    } catch (error) {
      return;  // the server is away for now: the next turn tries again
    }
    if (!answer.ok || answer.redirected) {  // signed out, or refused: stop asking
      stopped.add(id);
      part.classList.add("stale");
      return;
    }
    const doc = new DOMParser().parseFromString(await answer.text(), "text/html");
    const fresh = doc.getElementById(id);
    if (!fresh || !fresh.hasAttribute("data-live")) {  // not the part: the sign-in page
      stopped.add(id);
      part.classList.add("stale");
      return;
    }
    const adopted = document.importNode(fresh, true);
    part.replaceWith(adopted);
    if (window.onceboxLocalize) window.onceboxLocalize(adopted);
  }

  function refreshAll() {
    for (const part of parts) refresh(part.id);
  }
  for (const part of parts) {
    const every = Math.max(2, Number(part.dataset.every) || 15) * 1000;
    setInterval(() => refresh(part.id), every);
  }
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) refreshAll();
  });
})();
