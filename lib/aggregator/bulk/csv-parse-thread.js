// csv-parse in a worker thread (csv-table.ts `parseInThread` starts one per table and feeds it the
// file's text): parsing is ~a third of the main thread's work while a large upload is staged, and
// the worker's other core is mostly idle then. Plain JavaScript importing only csv-parse, as
// lib/search/usearch-thread.js is: the thread needs no TypeScript loader.
//
// workerData {options (csv-parse's), batch (records a message at most)}. Messages in: {chunk}
// (a Buffer or string of the text, in order), then {end}. Messages out, in order: {records} (up to
// `batch` records), {written} once per chunk parsed (the sender's flow control), and finally
// {end}, or {error: {code, message}} (a CsvError's code, or none) after which nothing follows.
import { parentPort, workerData } from 'node:worker_threads';
import { parse } from 'csv-parse';

const parser = parse(workerData.options);
let records = [];
let failed = false;
const flush = () => {
  if (records.length) parentPort.postMessage({ records });
  records = [];
};
parser.on('data', (record) => {
  records.push(record);
  if (records.length === workerData.batch) flush();
});
parser.on('error', (err) => {
  failed = true;
  flush();
  parentPort.postMessage({ error: { code: err.code, message: err.message } });
});
parser.on('end', () => {
  flush();
  parentPort.postMessage({ end: true });
});
parentPort.on('message', (message) => {
  if (failed) return;
  if (message.end) parser.end();
  else parser.write(message.chunk, () => parentPort.postMessage({ written: true }));
});
