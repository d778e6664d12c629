// Copying to the clipboard, also where the Clipboard API is missing: a Boson reached over plain
// http on another host is not a secure context, so browsers hide navigator.clipboard there.

import { h } from './dom.js';

/** Puts `text` on the clipboard; true when it got there. */
export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const buffer = h('textarea', { class: 'copy-buffer', readonly: true, 'aria-hidden': 'true' });
    buffer.value = text;
    document.body.append(buffer);
    buffer.select();
    const copied = document.execCommand('copy');
    buffer.remove();
    return copied;
  }
}

/** A Copy button for `value()` (read at click time, so a rotated secret copies the new one). */
export function copyButtonOf(value, label) {
  const button = h('button', { type: 'button', class: 'secondary', 'aria-label': `Copy ${label}`, onclick: async () => {
    button.textContent = (await copyText(value())) ? 'Copied' : 'Copy failed: select the text';
    setTimeout(() => { button.textContent = 'Copy'; }, 1500);
  } }, 'Copy');
  return button;
}
