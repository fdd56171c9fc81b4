/* Search results without raw TeX.
 *
 * Sphinx's search shows section titles from its index and excerpts cut from each page's
 * HTML, where a formula is still its TeX source (MathJax typesets it only on the page):
 * "Why divide by \sqrt{d_k}?". This file rewrites both as plain text ("Why divide by √dₖ?")
 * before the search runs: titles when the index is set, excerpts as Sphinx extracts them.
 * It is loaded on every page (conf.py) and does something only on the search page.
 */
"use strict";

const TEX_SYMBOLS = {
  alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ε", varepsilon: "ε",
  zeta: "ζ", eta: "η", theta: "θ", kappa: "κ", lambda: "λ", mu: "μ", nu: "ν", xi: "ξ",
  pi: "π", rho: "ρ", sigma: "σ", tau: "τ", phi: "φ", varphi: "φ", chi: "χ", psi: "ψ",
  omega: "ω", Gamma: "Γ", Delta: "Δ", Theta: "Θ", Lambda: "Λ", Pi: "Π", Sigma: "Σ",
  Phi: "Φ", Omega: "Ω", ell: "ℓ", partial: "∂", nabla: "∇", infty: "∞", approx: "≈",
  sim: "~", propto: "∝", cap: "∩", cup: "∪", cdot: "·", cdots: "⋯", dots: "…", ldots: "…",
  in: "∈", notin: "∉", le: "≤", leq: "≤", ge: "≥", geq: "≥", ne: "≠", neq: "≠", ll: "≪",
  gg: "≫", odot: "⊙", otimes: "⊗", oplus: "⊕", times: "×", div: "÷", pm: "±", to: "→",
  rightarrow: "→", leftarrow: "←", Rightarrow: "⇒", mapsto: "↦", mid: "|", vert: "|",
  lVert: "‖", rVert: "‖", Vert: "‖", sum: "Σ", prod: "Π", top: "ᵀ", prime: "′",
  langle: "⟨", rangle: "⟩", lfloor: "⌊", rfloor: "⌋", lceil: "⌈", rceil: "⌉",
  forall: "∀", exists: "∃", emptyset: "∅", quad: " ", qquad: " ",
  "{": "{", "}": "}", "_": "_", "%": "%", "#": "#", "&": "&", $: "$", "|": "‖",
  ",": " ", ";": " ", ":": " ", " ": " ", "!": "", "\\": "; ",
};
// Commands that only style or size what follows: keep what they apply to.
const TEX_STYLES = new Set([
  "text", "textrm", "textit", "textbf", "texttt", "mathrm", "mathit", "mathbf", "mathsf",
  "mathtt", "mathcal", "mathbb", "mathfrak", "boldsymbol", "bm", "operatorname",
  "displaystyle", "textstyle", "scriptstyle", "left", "right", "big", "Big", "bigg", "Bigg",
  "bigl", "bigr", "Bigl", "Bigr", "limits", "nolimits",
]);
const TEX_ACCENTS = { hat: "\u0302", widehat: "\u0302", bar: "\u0304", overline: "\u0305",
  tilde: "\u0303", widetilde: "\u0303", vec: "\u20d7", dot: "\u0307" };
const SUPERSCRIPTS = { 0: "⁰", 1: "¹", 2: "²", 3: "³", 4: "⁴", 5: "⁵", 6: "⁶", 7: "⁷",
  8: "⁸", 9: "⁹", "+": "⁺", "-": "⁻", "−": "⁻", n: "ⁿ", i: "ⁱ", T: "ᵀ", "ᵀ": "ᵀ" };
const SUBSCRIPTS = { 0: "₀", 1: "₁", 2: "₂", 3: "₃", 4: "₄", 5: "₅", 6: "₆", 7: "₇", 8: "₈",
  9: "₉", "+": "₊", "-": "₋", a: "ₐ", e: "ₑ", h: "ₕ", i: "ᵢ", j: "ⱼ", k: "ₖ", l: "ₗ",
  m: "ₘ", n: "ₙ", o: "ₒ", p: "ₚ", r: "ᵣ", s: "ₛ", t: "ₜ", u: "ᵤ", v: "ᵥ", x: "ₓ" };

/** Split TeX into tokens: ["cmd", name], ["group", tokens] and ["char", c]. */
function texTokens(tex) {
  const stack = [[]];
  for (let i = 0; i < tex.length; i++) {
    const c = tex[i];
    if (c === "\\") {
      const name = /^[A-Za-z]+/.exec(tex.slice(i + 1));
      const command = name ? name[0] : tex[i + 1] || "";
      stack[stack.length - 1].push(["cmd", command]);
      i += command.length;
    } else if (c === "{") {
      stack.push([]);
    } else if (c === "}") {
      if (stack.length > 1) {
        const group = stack.pop();
        stack[stack.length - 1].push(["group", group]);
      }
    } else {
      stack[stack.length - 1].push(["char", c]);
    }
  }
  while (stack.length > 1) {  // unbalanced: close what is open
    const group = stack.pop();
    stack[stack.length - 1].push(["group", group]);
  }
  return stack[0];
}

function wrapped(text) {
  return [...text].length <= 1 || /^[\p{L}\p{N}_.]+$/u.test(text) ? text : `(${text})`;
}

function scripted(text, table, mark) {
  const chars = [...text.replace(/\s+/g, "")];
  if (chars.length && chars.every((c) => c in table)) return chars.map((c) => table[c]).join("");
  return mark + wrapped(text);
}

/** Plain text for a list of tokens. */
function texRender(tokens) {
  let out = "";
  let i = 0;
  const next = () => {  // the next argument: a group or one token, spaces skipped as in TeX
    while (i < tokens.length && tokens[i][0] === "char" && /\s/.test(tokens[i][1])) i++;
    return i < tokens.length ? texRender([tokens[i++]]) : "";
  };
  while (i < tokens.length) {
    const [kind, value] = tokens[i++];
    if (kind === "group") {
      out += texRender(value);
    } else if (kind === "char") {
      if (value === "^") out += scripted(next(), SUPERSCRIPTS, "^");
      else if (value === "_") out += scripted(next(), SUBSCRIPTS, "_");
      else if (value === "~") out += " ";
      else if (value === "&") out += " ";
      else out += value;
    } else if (value === "frac" || value === "tfrac" || value === "dfrac") {
      const top = next();
      out += `${wrapped(top)}/${wrapped(next())}`;
    } else if (value === "sqrt") {
      if (tokens[i] && tokens[i][1] === "[") {  // \sqrt[n]{x}: skip the index
        while (i < tokens.length && tokens[i][1] !== "]") i++;
        i++;
      }
      out += `√${wrapped(next())}`;
    } else if (value in TEX_ACCENTS) {
      out += next() + TEX_ACCENTS[value];
    } else if (value === "begin" || value === "end") {
      next();  // the environment's name
    } else if (TEX_STYLES.has(value)) {
      // what it styles follows as the next token, rendered by the loop; "\left." is nothing
      if ((value === "left" || value === "right") && tokens[i] && tokens[i][1] === ".") i++;
    } else if (value in TEX_SYMBOLS) {
      out += TEX_SYMBOLS[value];
    } else {
      out += value;  // \log, \max, \softmax: the name itself
    }
  }
  return out;
}

/** A formula's TeX as readable text: "\sqrt{d_k}" becomes "√dₖ". */
function texToText(tex) {
  const body = tex.trim().replace(/^(\\\(|\\\[|\$\$?)([\s\S]*?)(\\\)|\\\]|\$\$?)$/, "$2");
  return texRender(texTokens(body)).replace(/\s+/g, " ").trim();
}

/** A title or excerpt with its TeX (a command or a delimited formula) turned to text. */
function textWithoutTex(text) {
  return /\\|\$/.test(text) ? texToText(text) : text;
}

if (typeof module !== "undefined") module.exports = { texToText, textWithoutTex };

if (typeof document !== "undefined")
  document.addEventListener("DOMContentLoaded", () => {
    // Runs before searchtools.js's own DOMContentLoaded handler starts the search: this
    // script comes first in the page, so its handler was added first.
    if (typeof Search === "undefined") return;
    const plainTitles = (index) => {
      index.titles = index.titles.map(textWithoutTex);
      const titles = {};
      for (const [title, where] of Object.entries(index.alltitles || {}))
        titles[textWithoutTex(title)] = (titles[textWithoutTex(title)] || []).concat(where);
      index.alltitles = titles;
      return index;
    };
    if (Search._index) plainTitles(Search._index);
    const setIndex = Search.setIndex;
    Search.setIndex = (index) => setIndex(plainTitles(index));
    const htmlToText = Search.htmlToText;
    Search.htmlToText = (htmlString, anchor) => {
      const page = new DOMParser().parseFromString(htmlString, "text/html");
      page.querySelectorAll(".math").forEach((math) => {
        math.textContent = texToText(math.textContent);
      });
      return htmlToText(page.documentElement.outerHTML, anchor);
    };
  });
