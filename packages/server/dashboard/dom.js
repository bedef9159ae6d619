/* global document */
// Every node of the dashboard is built here. Data (resource names, rule texts, authors,
// reasons) only ever becomes text nodes or attribute values: nothing is parsed as HTML.

const SVG_NS = 'http://www.w3.org/2000/svg';

/**
 * Creates an HTML element with attributes and children; string children become text nodes.
 * @param {string} tag
 * @param {Record<string, string | number>} [attrs]
 * @param {...(Node | string)} children
 * @returns {HTMLElement}
 */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  node.append(...children);
  return node;
}

/**
 * Creates an SVG element with attributes and children; string children become text nodes.
 * @param {string} tag
 * @param {Record<string, string | number>} [attrs]
 * @param {...(Node | string)} children
 * @returns {SVGElement}
 */
export function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  node.append(...children);
  return node;
}

/**
 * The element with this id (the page's own markup, so it exists).
 * @param {string} id
 * @returns {HTMLElement}
 */
export function byId(id) {
  const node = document.getElementById(id);
  if (node === null) throw new Error(`the page has no #${id}`);
  return node;
}
