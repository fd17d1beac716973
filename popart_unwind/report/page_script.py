"""The report page's one script and the styles of what it draws.

Plain JavaScript, embedded in the page: no library, no network. It makes the tensor table
searchable (by name; a search opens what it finds at once: the tensor it names in full,
else its first five matches), filterable (by method, and by whether PopART lays the tensor out
otherwise), sortable (any column), and opens under a row that tensor's explanations and
a drawing of its layouts, built as inline SVG from the compact cells of
``layout_data.py``. Drawings are made when asked for, so a table of thousands of tensors
loads as fast as its rows.
"""

STYLE = """
.controls { display: flex; flex-wrap: wrap; gap: 0.5em 1em; align-items: center;
            margin: 0.5em 0; }
.controls input[type=search] { width: 18em; max-width: 100%; }
#tensor-table { width: 100%; table-layout: fixed; }
#tensor-table th { cursor: pointer; user-select: none; overflow-wrap: break-word; }
#tensor-table th[aria-sort=ascending]::after { content: " \\25B2"; }
#tensor-table th[aria-sort=descending]::after { content: " \\25BC"; }
#tensor-table td { overflow-wrap: anywhere; }
#tensor-table th:nth-child(1) { width: 18%; } #tensor-table th:nth-child(2) { width: 5%; }
#tensor-table th:nth-child(3) { width: 6%; } #tensor-table th:nth-child(4) { width: 5%; }
#tensor-table th:nth-child(5) { width: 6%; } #tensor-table th:nth-child(6) { width: 7%; }
#tensor-table th:nth-child(7) { width: 9%; } #tensor-table th:nth-child(8) { width: 5%; }
button.open { font: inherit; color: #0645ad; background: none; border: 0; padding: 0;
              text-align: left; cursor: pointer; overflow-wrap: anywhere; }
button.open:hover { text-decoration: underline; }
tr.detail > td { background: #fafafa; }
.layouts { display: flex; flex-wrap: wrap; gap: 1em; margin: 0.5em 0; }
.layouts figure { margin: 0; flex: 1 1 300px; max-width: 460px; }
.layouts svg { width: 100%; height: auto; display: block; border: 1px solid #ddd; }
.layouts figcaption { font-size: 0.85em; color: #444; }
.explanation { margin: 0.3em 0; }
.difference { border-left: 3px solid #1f77b4; padding-left: 0.8em; margin: 1.2em 0; }
.difference h4 { margin: 0.2em 0; font-size: 1em; overflow-wrap: anywhere; }
"""

SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("tensor-data").textContent);
  // viridis at the nine levels of layout_data.py (level 1: a few elements, 9: all)
  var COLOURS = ["#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962",
                 "#addc30", "#d8e219", "#fde725"];
  var W = 320, H = 140, LEFT = 44, BOTTOM = 28, TOP = 6, RIGHT = 8;

  function decode(text, size) {
    var cells = new Array(size), n = 0, re = /([a-j])(\d*)/g, m;
    while ((m = re.exec(text)) !== null) {
      var level = m[1].charCodeAt(0) - 97, count = m[2] ? parseInt(m[2], 10) : 1;
      for (var k = 0; k < count; k++) { cells[n++] = level; }
    }
    return cells;
  }

  function escapeText(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;")
      .replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  }

  function drawing(frame, cells) {
    var first = frame[0], end = frame[1], eb = frame[2], tb = frame[3], numel = frame[4];
    var pw = W - LEFT - RIGHT, ph = H - TOP - BOTTOM, cw = pw / eb, ch = ph / tb;
    var parts = ['<svg viewBox="0 0 ' + W + " " + H + '" role="img">',
                 '<rect x="' + LEFT + '" y="' + TOP + '" width="' + pw + '" height="' + ph +
                 '" fill="#fff" stroke="#999"/>'];
    for (var e = 0; e < eb; e++) {
      for (var t = 0; t < tb; t++) {
        var level = cells[e * tb + t];
        if (level > 0) {
          parts.push('<rect x="' + (LEFT + e * cw).toFixed(2) + '" y="' +
                     (TOP + ph - (t + 1) * ch).toFixed(2) + '" width="' +
                     (cw + 0.05).toFixed(2) + '" height="' + (ch + 0.05).toFixed(2) +
                     '" fill="' + COLOURS[level - 1] + '"/>');
        }
      }
    }
    parts.push('<text x="' + (LEFT + pw / 2) + '" y="' + (H - 4) +
               '" font-size="10" text-anchor="middle">element 0 to ' + (numel - 1) +
               " (row-major)</text>");
    parts.push('<text x="' + (LEFT - 4) + '" y="' + (TOP + ph) +
               '" font-size="10" text-anchor="end">' + first + "</text>");
    parts.push('<text x="' + (LEFT - 4) + '" y="' + (TOP + 10) +
               '" font-size="10" text-anchor="end">' + (end - 1) + "</text>");
    parts.push('<text x="10" y="' + (TOP + ph / 2) + '" font-size="10" ' +
               'text-anchor="middle" transform="rotate(-90 10 ' + (TOP + ph / 2) +
               ')">tile</text>');
    parts.push("</svg>");
    return parts.join("");
  }

  function layouts(i) {
    var t = data.tensors[i], layout = t[3], figures = [];
    data.plans.forEach(function (plan) {
      var drawn = layout.plans[plan];
      if (!drawn) { return; }
      var frame = layout.frame, size = frame[2] * frame[3];
      figures.push("<figure>" + drawing(frame, decode(drawn[1], size)) +
                   "<figcaption>" + escapeText(data.titles[plan]) + ": " + drawn[0] +
                   " of " + data.tiles + " tiles</figcaption></figure>");
    });
    return '<div class="layouts">' + figures.join("") + "</div>";
  }

  function explanations(i) {
    var t = data.tensors[i], parts = [];
    data.plans.forEach(function (plan, k) {
      if (t[1 + k] !== null) {
        parts.push('<p class="explanation"><b>' + escapeText(data.titles[plan]) +
                   ":</b> " + escapeText(t[1 + k]) + "</p>");
      }
    });
    return parts.join("");
  }

  // the pictures of the differences section
  Array.prototype.forEach.call(document.querySelectorAll("div.layout-slot"),
    function (slot) { slot.innerHTML = layouts(parseInt(slot.dataset.i, 10)); });

  var table = document.getElementById("tensor-table");
  if (!table) { return; }
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.rows);
  var columns = table.tHead.rows[0].cells.length;
  var search = document.getElementById("tensor-search");
  var method = document.getElementById("method-filter");
  var differs = document.getElementById("differs-filter");
  var shown = document.getElementById("tensor-count");

  function closeAll() {
    Array.prototype.slice.call(body.querySelectorAll("tr.detail")).forEach(function (d) {
      var button = d.previousElementSibling.querySelector("button.open");
      button.setAttribute("aria-expanded", "false");
      d.remove();
    });
  }

  function open(row) {
    var button = row.querySelector("button.open");
    if (row.nextElementSibling && row.nextElementSibling.className === "detail") {
      row.nextElementSibling.remove();
      button.setAttribute("aria-expanded", "false");
      return;
    }
    var i = parseInt(row.dataset.i, 10), detail = document.createElement("tr");
    detail.className = "detail";
    detail.innerHTML = '<td colspan="' + columns + '">' + explanations(i) + layouts(i) +
                       "</td>";
    row.after(detail);
    button.setAttribute("aria-expanded", "true");
  }

  // a search opens what it finds: the tensor it names in full, else its first matches
  var OPENED_AT_MOST = 5;

  function filter() {
    var text = search.value.trim().toLowerCase(), wanted = method ? method.value : "";
    var which = differs ? differs.value : "", found = [], exact = null;
    closeAll();
    rows.forEach(function (row) {
      var name = row.dataset.name.toLowerCase();
      var visible = (!text || name.indexOf(text) >= 0) &&
        (!wanted || row.dataset.method === wanted) &&
        (!which || row.dataset.differs === which);
      row.hidden = !visible;
      if (visible) { found.push(row); if (name === text) { exact = row; } }
    });
    var opened = !text ? [] : exact ? [exact] : found.slice(0, OPENED_AT_MOST);
    opened.forEach(open);
    var status = found.length + " of " + rows.length + " tensors shown";
    if (opened.length && opened.length < found.length) {
      status += exact ? ", the one named in full opened"
                      : ", the first " + opened.length + " opened";
    }
    shown.textContent = status;
  }

  function sortBy(header) {
    var index = header.cellIndex, numeric = header.dataset.type === "number";
    var ascending = header.getAttribute("aria-sort") !== "ascending";
    Array.prototype.forEach.call(header.parentNode.cells, function (cell) {
      cell.removeAttribute("aria-sort");
    });
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    closeAll();
    var keyed = rows.map(function (row, position) {
      var cell = row.cells[index];
      var value = numeric ? parseFloat(cell.dataset.v || "NaN") : cell.textContent;
      return [value, position, row];
    });
    keyed.sort(function (a, b) {
      var x = a[0], y = b[0], order;
      if (numeric) {
        if (isNaN(x) || isNaN(y)) { order = isNaN(x) - isNaN(y); }
        else { order = ascending ? x - y : y - x; }
      } else {
        order = ascending ? x.localeCompare(y) : y.localeCompare(x);
      }
      return order || a[1] - b[1];
    });
    var fragment = document.createDocumentFragment();
    keyed.forEach(function (k) { fragment.appendChild(k[2]); });
    body.appendChild(fragment);
    rows = keyed.map(function (k) { return k[2]; });
  }

  body.addEventListener("click", function (event) {
    var button = event.target.closest("button.open");
    if (button) { open(button.closest("tr")); }
  });
  table.tHead.addEventListener("click", function (event) {
    var header = event.target.closest("th");
    if (header) { sortBy(header); }
  });
  [search, method, differs].forEach(function (control) {
    if (control) { control.addEventListener("input", filter); }
  });
  document.addEventListener("click", function (event) {
    var link = event.target.closest("a.to-tensor");
    if (!link) { return; }
    var row = document.getElementById(link.getAttribute("href").slice(1));
    if (row && row.hidden) { search.value = ""; if (method) { method.value = ""; }
                             if (differs) { differs.value = ""; } filter(); }
    var next = row && row.nextElementSibling;
    if (row && !(next && next.className === "detail")) { open(row); }
  });
  shown.textContent = rows.length + " of " + rows.length + " tensors shown";
})();
"""
