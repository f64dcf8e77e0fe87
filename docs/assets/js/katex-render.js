// Render the maths that pymdownx.arithmatex (generic mode) leaves in <span class="arithmatex">
// \( ... \)</span> and <div class="arithmatex">\[ ... \]</div>, with the KaTeX bundled under
// docs/assets/katex/ (no network at view time). Material's instant navigation is off, so the
// page's load event is enough.
(function () {
  function render() {
    document.querySelectorAll(".arithmatex").forEach(function (el) {
      var tex = el.textContent.trim();
      var display = el.tagName === "DIV";
      tex = tex.replace(/^\\[\(\[]/, "").replace(/\\[\)\]]$/, "");
      try {
        katex.render(tex, el, { displayMode: display, throwOnError: false, strict: false });
      } catch (e) {
        el.setAttribute("title", String(e));
      }
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", render);
  } else {
    render();
  }
})();
