// memfs console: the pages work without this file; it only narrows the tree as you
// type in "Filter by path" (the form still filters on the server when submitted).
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const filter = document.getElementById("filter");
  const tree = document.getElementById("tree");
  if (!filter || !tree) return;
  filter.addEventListener("input", () => {
    const needle = filter.value.toLowerCase();
    for (const item of tree.querySelectorAll("li")) {
      item.hidden = needle !== "" && !item.textContent.toLowerCase().includes(needle);
    }
  });
});
