// Live parts of the operator console; every page works without this script.
// 1. A job page follows its upload over Server-Sent Events (no polling loop here: the server pushes).
// 2. The upload form's file input also takes a dropped file.
// 3. Copy buttons copy a field's text to the clipboard.
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
    // The session ended or the aggregator was suspended: reconnecting would be refused. (After a
    // `reconnect` event the EventSource reconnects by itself.)
    source.addEventListener('denied', () => source.close());
    source.addEventListener('done', (e) => {
      source.close();
      show(JSON.parse(e.data));
      progress.removeAttribute('data-events');
      progress.setAttribute('data-done', 'true');
      // The error rows and the report link are rendered by the server: load them once.
      window.location.reload();
    });
  }
  // Drag-and-drop onto the upload form's drop zone fills its file input (the input alone works too).
  for (const zone of document.querySelectorAll('[data-drop-for]')) {
    const input = document.getElementById(zone.getAttribute('data-drop-for'));
    const hint = document.createElement('span');
    hint.className = 'drop-hint';
    hint.textContent = zone.getAttribute('data-drop-label');
    zone.appendChild(hint);
    zone.addEventListener('dragover', (e) => { e.preventDefault(); zone.classList.add('over'); });
    zone.addEventListener('dragleave', () => zone.classList.remove('over'));
    zone.addEventListener('drop', (e) => {
      e.preventDefault();
      zone.classList.remove('over');
      if (e.dataTransfer && e.dataTransfer.files.length > 0) input.files = e.dataTransfer.files;
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
