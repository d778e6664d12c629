// A small SVG chart: lines or bars over a time axis, with a value axis, a legend, and a tooltip
// that follows the pointer (or the arrow keys when the chart has focus). It draws at the width
// its box has, and again when that width changes, so text stays the same size at 420 px and at
// 1440 px. No library: the dashboard has no build step.

import { h } from './dom.js';

const NS = 'http://www.w3.org/2000/svg';
export const COLORS = ['#3b5bdb', '#2f9e44', '#f08c00', '#ae3ec9', '#0c8599', '#e03131', '#5c940d', '#862e9c'];
const HEIGHT = 200, PAD = { top: 12, right: 12, bottom: 26, left: 46 };

function svgEl(tag, attrs = {}, text) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text != null) el.textContent = text;
  return el;
}

/** Value-axis ticks: a round step (1, 2 or 5 times a power of ten; whole for counts), 3–5 of them. */
function ticks(max, whole) {
  const raw = Math.max(max, whole ? 1 : 1e-9) / 4;
  const power = 10 ** Math.floor(Math.log10(raw));
  let step = [1, 2, 5, 10].map((m) => m * power).find((m) => m >= raw);
  if (whole) step = Math.max(1, Math.round(step));
  const top = Math.max(step, Math.ceil(max / step) * step);
  return { step, top };
}

/** A legend or tooltip colour square (coloured through the DOM: the CSP refuses style attributes). */
function swatch(color) {
  const el = h('span', { class: 'swatch' });
  el.style.background = color;
  return el;
}

/** A value as the axis and tooltip show it: counts as they are, latencies in ms or s. */
export function formatValue(value, unit) {
  if (value == null) return '–';
  if (unit === 'ms') return value >= 1000 ? `${(value / 1000).toFixed(value >= 10000 ? 0 : 1)} s` : `${Math.round(value * 10) / 10} ms`;
  return value >= 10000 ? `${Math.round(value / 1000)}k` : String(Math.round(value * 100) / 100);
}

const clock = (ms) => new Date(ms).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });

/**
 * A chart element. `times` are the steps' starts (ms); each series is `{ name, values }` with one
 * value (or null) per time. `kind` is 'line' or 'bar' (bars of several series stand side by side).
 */
export function chart({ title, times, series, unit = '', kind = 'line', id }) {
  const tip = h('div', { class: 'chart-tip', hidden: true, role: 'status' });
  const box = h('div', { class: 'chart-box' });
  const legend = h('ul', { class: 'chart-legend' }, ...series.map((s, i) =>
    h('li', {}, swatch(COLORS[i % COLORS.length]), s.name)));
  const figure = h('figure', { class: 'chart card', id, 'data-kind': kind },
    h('figcaption', {}, title), box, series.length ? legend : h('p', { class: 'muted' }, 'Nothing to show yet.'), tip);
  let width = 0;
  const draw = () => {
    const next = Math.max(260, Math.floor(box.clientWidth || 600));
    if (next === width) return;
    width = next;
    box.replaceChildren(render({ times, series, unit, kind, width, tip, title }));
  };
  // Drawn once the figure is in the page (its width is known then), and on every resize.
  new ResizeObserver(draw).observe(box);
  return figure;
}

function render({ times, series, unit, kind, width, tip, title }) {
  const plotW = width - PAD.left - PAD.right, plotH = HEIGHT - PAD.top - PAD.bottom;
  const all = series.flatMap((s) => s.values).filter((v) => v != null);
  const { step: tick, top } = ticks(Math.max(0, ...all), unit !== 'ms');
  const step = plotW / Math.max(times.length, 1);
  const x = (i) => PAD.left + step * (i + 0.5);
  const y = (v) => PAD.top + plotH - (v / top) * plotH;
  const svg = svgEl('svg', { width, height: HEIGHT, viewBox: `0 0 ${width} ${HEIGHT}`, role: 'img', tabindex: 0, 'aria-label': `${title}: use the arrow keys to read values` });
  for (let v = 0; v <= top + tick / 2; v += tick) {
    svg.append(svgEl('line', { class: 'grid', x1: PAD.left, x2: width - PAD.right, y1: y(v), y2: y(v) }),
      svgEl('text', { class: 'axis', x: PAD.left - 6, y: y(v) + 4, 'text-anchor': 'end' }, formatValue(v, unit)));
  }
  const labels = Math.max(2, Math.min(6, Math.floor(plotW / 90)));
  for (let l = 0; l < labels; l++) {
    const i = Math.round((l * (times.length - 1)) / (labels - 1));
    svg.append(svgEl('text', { class: 'axis', x: x(i), y: HEIGHT - 8, 'text-anchor': 'middle' }, clock(times[i])));
  }
  series.forEach((s, n) => {
    const color = COLORS[n % COLORS.length];
    const layer = svgEl('g', { class: 'series', 'data-series': s.name });
    if (kind === 'bar') {
      const barW = Math.max(1, (step * 0.8) / series.length);
      s.values.forEach((v, i) => {
        if (!v) return;
        layer.append(svgEl('rect', { class: 'bar', fill: color, x: x(i) - (step * 0.4) + n * barW, y: y(v), width: barW, height: Math.max(1, PAD.top + plotH - y(v)), 'data-value': v, 'data-time': times[i] }));
      });
    } else {
      // Gaps (null) break the line: no latency where nothing was delivered.
      let d = '';
      s.values.forEach((v, i) => { d += v == null ? '' : `${d && s.values[i - 1] != null ? 'L' : 'M'}${x(i).toFixed(1)},${y(v).toFixed(1)}`; });
      layer.append(svgEl('path', { class: 'line', d, stroke: color }));
      s.values.forEach((v, i) => {
        if (v) layer.append(svgEl('circle', { class: 'point', cx: x(i), cy: y(v), r: 2.5, fill: color, 'data-value': v, 'data-time': times[i] }));
      });
    }
    svg.append(layer);
  });
  const guide = svgEl('line', { class: 'guide', y1: PAD.top, y2: PAD.top + plotH, visibility: 'hidden' });
  svg.append(guide);
  let at = -1;
  const show = (i) => {
    at = Math.max(0, Math.min(times.length - 1, i));
    guide.setAttribute('x1', x(at)); guide.setAttribute('x2', x(at)); guide.setAttribute('visibility', 'visible');
    tip.replaceChildren(h('strong', {}, clock(times[at])), ...series.map((s, n) =>
      h('div', {}, swatch(COLORS[n % COLORS.length]), `${s.name}: ${formatValue(s.values[at], unit)}`)));
    tip.hidden = false;
    const left = Math.min(x(at) + 12, width - 180);
    tip.style.left = `${Math.max(0, left)}px`;
  };
  const hide = () => { guide.setAttribute('visibility', 'hidden'); tip.hidden = true; };
  svg.addEventListener('pointermove', (e) => { const r = svg.getBoundingClientRect(); show(Math.floor((e.clientX - r.left - PAD.left) / step)); });
  svg.addEventListener('pointerleave', hide);
  svg.addEventListener('blur', hide);
  svg.addEventListener('keydown', (e) => {
    if (e.key === 'ArrowLeft' || e.key === 'ArrowRight') { e.preventDefault(); show(at < 0 ? times.length - 1 : at + (e.key === 'ArrowRight' ? 1 : -1)); }
    if (e.key === 'Escape') hide();
  });
  return svg;
}

/** Two toggle buttons, Last hour and Last day; `onChange` gets 'hour' or 'day'. */
export function rangeSwitch(current, onChange) {
  const button = (range, label) => h('button', { type: 'button', class: 'secondary', 'data-range': range, 'aria-pressed': String(range === current),
    onclick: () => onChange(range) }, label);
  return h('div', { class: 'range-switch', role: 'group', 'aria-label': 'Time range' }, button('hour', 'Last hour'), button('day', 'Last day'));
}
