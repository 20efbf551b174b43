// The explorers of the course website (tools/build_book_explorers.py writes their HTML).
// Every frame was rendered when the site was built, numbered in row-major order of the
// controls' values; moving a control shows the frame of the new values, with its alt text,
// and the control's <output> (aria-live) announces the value. Nothing is fetched from
// another host: the frames sit next to this file, so the page works from file:// as well.
(function () {
  "use strict";

  function setup(root) {
    const spec = JSON.parse(root.dataset.spec);
    const img = root.querySelector("img.posenc-explorer-frame");
    const fields = spec.controls.map((c) => root.querySelector('[data-control="' + c.name + '"]'));

    function chosen(field, control) {
      if (field.type === "checkbox") return control.values.indexOf(field.checked);
      if (field.tagName === "SELECT") return field.selectedIndex;
      return Number(field.value);
    }

    function update() {
      let frame = 0;
      let alt = spec.alt;
      spec.controls.forEach((control, k) => {
        const i = chosen(fields[k], control);
        const text = control.labels[i];
        frame = frame * control.labels.length + i;
        alt = alt.split("{" + control.name + "}").join(text);
        const output = root.querySelector('output[data-for="' + control.name + '"]');
        if (output) output.value = text;
        if (fields[k].type === "range") fields[k].setAttribute("aria-valuetext", text);
      });
      img.alt = alt;
      img.src = spec.base + frame + ".png";
    }

    fields.forEach((field) => field.addEventListener(field.type === "range" ? "input" : "change", update));
  }

  function start() {
    document.querySelectorAll(".posenc-explorer").forEach(setup);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
