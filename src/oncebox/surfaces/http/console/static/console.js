// oncebox console: times in the browser's own zone, UTC on hover, ISO 8601 either way.
// Every <time datetime> is served in UTC; this script rewrites its text in local time
// with its offset (2030-01-15T13:30:00+05:30; its title keeps the UTC), sets the chart's
// labels (data-hour, data-day), names the zone (data-zone), and lets the date pickers
// (data-when) be used in local time: they are sent with their offset, and shown back in
// local time (from data-utc). Without the script, the page reads and takes times in UTC,
// as served. static/live.js calls window.onceboxLocalize on what it puts in place.
"use strict";
(function () {
  const pad = (n) => String(n).padStart(2, "0");
  const day = (d) => `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
  const clock = (d) => `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  const valid = (d) => !Number.isNaN(d.getTime());
  const offsetOf = (d) => {
    const east = -d.getTimezoneOffset();
    const sign = east < 0 ? "-" : "+";
    return `${sign}${pad(Math.floor(Math.abs(east) / 60))}:${pad(Math.abs(east) % 60)}`;
  };
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";

  function localize(root) {
    for (const t of root.querySelectorAll("time[datetime]")) {
      const at = new Date(t.dateTime);
      if (!valid(at)) continue;
      t.textContent = `${day(at)}T${clock(at)}${offsetOf(at)}`;
      t.title = `${t.dateTime} UTC`;
    }
    for (const label of root.querySelectorAll("[data-hour]")) {
      const at = new Date(label.dataset.hour);
      if (valid(at)) label.textContent = pad(at.getHours());
    }
    for (const label of root.querySelectorAll("[data-day]")) {
      const at = new Date(label.dataset.day);
      if (valid(at)) label.textContent = day(at).slice(5);
    }
    for (const z of root.querySelectorAll("[data-zone]")) z.textContent = zone;
  }
  window.onceboxLocalize = localize;
  localize(document);

  const offset = /(Z|[+-]\d\d:?\d\d)$/i;
  const inputs = document.querySelectorAll("input[data-when]");
  for (const input of inputs) {  // a time sent with its offset, shown back in local time
    const at = new Date(input.dataset.utc || "");
    if (input.dataset.utc && valid(at)) input.value = `${day(at)}T${clock(at)}`;
  }
  for (const form of new Set([...inputs].map((input) => input.form))) {
    form.addEventListener("submit", () => {
      for (const input of form.querySelectorAll("input[data-when]")) {
        const typed = input.value.trim();
        if (!typed || offset.test(typed)) continue;
        const at = new Date(typed.length === 10 ? `${typed}T00:00` : typed);  // local
        if (!valid(at)) continue;
        input.type = "text";  // a date picker holds no offset: sent as text, in UTC
        input.value = at.toISOString();
      }
    });
  }
})();
