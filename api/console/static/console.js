// Live parts of the operator console; every page works without this script.
// 1. A job page follows its upload over Server-Sent Events (no polling loop here: the server pushes).
// 2. Copy buttons copy a field's text to the clipboard.
document.addEventListener('DOMContentLoaded', () => {
  const progress = document.querySelector('[data-events]');
  if (progress && 'EventSource' in window) {
    const source = new EventSource(progress.getAttribute('data-events'));
    const show = (data) => {
      for (const el of progress.querySelectorAll('[data-field]')) {
        const name = el.getAttribute('data-field');
        if (name === 'status') el.textContent = el.getAttribute(`data-label-${data.status}`) || data.status;
        else if (data[name] !== undefined && data[name] !== null) el.textContent = String(data[name]);
      }
      const bar = document.getElementById('bar');
      if (bar && data.total_rows) {
        bar.max = data.total_rows;
        bar.value = data.processed_rows;
      }
    };
    source.addEventListener('progress', (e) => show(JSON.parse(e.data)));
    source.addEventListener('done', (e) => {
      source.close();
      show(JSON.parse(e.data));
      progress.removeAttribute('data-events');
      progress.setAttribute('data-done', 'true');
      // The error rows and the report link are rendered by the server: load them once.
      window.location.reload();
    });
  }
  for (const button of document.querySelectorAll('button[data-copy]')) {
    button.hidden = false;
    button.addEventListener('click', async () => {
      const field = document.querySelector(button.getAttribute('data-copy'));
      await navigator.clipboard.writeText(field.value);
      const note = button.parentElement.querySelector('.copied');
      if (note) note.textContent = '✓';
    });
  }
});
