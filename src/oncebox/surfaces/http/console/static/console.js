// oncebox console: times in the browser's own zone, UTC on hover.
// Every <time datetime> is served in UTC; this script rewrites its text in local time
// (its title keeps the UTC), sets the chart's hour labels (data-hour), names the zone
// (data-zone), and lets the time filters (data-when) be typed in local time: they are
// sent with their offset, and shown back in local time. Without the script, the page
// reads and takes times in UTC, as served.
"use strict";
(function () {
  const pad = (n) => String(n).padStart(2, "0");
  const day = (d) => `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
  const minutes = (d) => `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  const valid = (d) => !Number.isNaN(d.getTime());
  for (const t of document.querySelectorAll("time[datetime]")) {
    const at = new Date(t.dateTime);
    if (!valid(at)) continue;
    t.textContent = `${day(at)} ${minutes(at)}:${pad(at.getSeconds())}`;
    t.title = `${t.dateTime} UTC`;
  }
  for (const label of document.querySelectorAll("[data-hour]")) {
    const at = new Date(label.dataset.hour);
    if (valid(at)) label.textContent = pad(at.getHours());
  }
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
  for (const z of document.querySelectorAll("[data-zone]")) z.textContent = zone;

  const offset = /(Z|[+-]\d\d:?\d\d)$/i;
  const dateOnly = /^\d{4}-\d\d-\d\d$/;
  const inputs = document.querySelectorAll("input[data-when]");
  for (const input of inputs) {  // a time sent with its offset, shown back in local time
    const at = new Date(input.value.trim());
    if (offset.test(input.value.trim()) && valid(at)) {
      input.value = `${day(at)}T${minutes(at)}:${pad(at.getSeconds())}`;
    }
  }
  for (const form of new Set([...inputs].map((input) => input.form))) {
    form.addEventListener("submit", () => {
      for (const input of form.querySelectorAll("input[data-when]")) {
        const typed = input.value.trim();
        if (!typed || offset.test(typed) || /^[0-9.]+$/.test(typed)) continue;
        const at = new Date(dateOnly.test(typed) ? `${typed}T00:00` : typed);  // local
        if (valid(at)) input.value = at.toISOString();
      }
    });
  }
})();
