// Disable a form's submit button once it is sent, so a double click sends one request.
// (The server stores one rating per page anyway; this only spares a second round trip.)
document.addEventListener("submit", function (event) {
  var button = event.target.querySelector("button[type=submit]");
  if (button) {
    setTimeout(function () { button.disabled = true; }, 0);
  }
});

// A slider shows its value beside it (the value is also read out by screen readers).
document.addEventListener("input", function (event) {
  var slider = event.target;
  if (slider.type === "range") {
    var out = document.getElementById(slider.id + "-out");
    if (out) { out.textContent = slider.value; }
  }
});

// Keyboard: a number key chooses that value in the current question (the one holding the
// focus, else the first unanswered one) and moves on to the next unanswered question; Enter
// saves the page. Pairwise pages: 1 = A, 2 = B, 0 = about the same. Sliders keep their own
// keys (arrows by one, Page Up/Down by ten).
document.addEventListener("keydown", function (event) {
  if (event.altKey || event.ctrlKey || event.metaKey) { return; }
  var form = document.querySelector("form.rating");
  var target = event.target;
  if (!form || !target || target.tagName === "TEXTAREA") { return; }
  if (target.tagName === "INPUT" && target.type !== "radio" && target.type !== "range") { return; }
  if (event.key === "Enter") {
    if (["A", "BUTTON", "SUMMARY"].indexOf(target.tagName) >= 0) { return; }
    event.preventDefault();
    if (form.reportValidity()) { form.requestSubmit(); }
    return;
  }
  if (!/^[0-9]$/.test(event.key) || target.type === "range") { return; }
  var questions = Array.prototype.slice.call(form.querySelectorAll("fieldset.criterion"));
  var unanswered = function (q) { return !q.querySelector("input:checked"); };
  var current = target.closest ? target.closest("fieldset.criterion") : null;
  current = current || questions.filter(unanswered)[0] || questions[0];
  var choice = current && current.querySelector("input[type=radio][data-key='" + event.key + "']");
  if (!choice) { return; }
  event.preventDefault();
  choice.checked = true;
  var next = questions.filter(unanswered)[0];
  (next ? next.querySelector("input[type=radio]") : choice).focus();
});
