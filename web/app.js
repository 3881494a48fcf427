// vgen's page: submit jobs (a model, an image, a LoRA and a priority where the service offers
// them), watch the queue (progress and previews over the job's event stream),
// play and download results, cancel. Plain DOM, no libraries, nothing from the network but
// this origin's API.
//
// Security: text from the API or the user (prompts, error messages) is only ever put into the
// page with textContent, never parsed as HTML. The token is kept in sessionStorage (this tab)
// and sent as an Authorization header, never in a URL; that is why the event stream is read
// with fetch() (EventSource cannot send headers) and previews and videos are fetched as blobs.
//
// Observing the page: each time it has rendered news of a job, the job's <li> dispatches a
// bubbling "job-event" CustomEvent whose detail is {id, name, data, state, value, text}: where
// the news came from (the stream's event name: progress, preview, done, failed, cancelled; or
// submitted, list, status, cancel for an API answer), the news as received, then the badge, the
// progress bar's value and the detail line as shown. After each preview fetch it dispatches
// "job-preview" with {id, step, shown, reason, width}. The live player (playLive) dispatches
// "job-live" with {id, bytes, buffered} after each piece of the stream it has appended (buffered:
// seconds of video the element holds, first frame to last) and {id, ended: true, bytes, buffered} at the stream's end;
// a stream it could not play ends with {id, ended: true, bytes, buffered, reason} saying why.
// Nothing is kept when nobody listens.
// Tests (and embedders) listen on the document instead of sampling the DOM, so they see every
// change however busy the machine is.
"use strict";

const TOKEN_KEY = "vgen.token";
const PAGE_SIZE = 20;
const TERMINAL = new Set(["done", "failed", "cancelled", "interrupted"]);
const STAGE_SHARE = { queued: 0, preprocess: 0.03, running: 0.03, denoise: 0.05, decode: 0.92, interpolate: 0.93, upscale: 0.94, encode: 0.96, done: 1 };

let token = sessionStorage.getItem(TOKEN_KEY) || "";
let tokenPrompt = null;  // the pending dialog, shared by every request that got a 401
let nextCursor = null;
const jobs = new Map();  // id -> Job

const $ = (id) => document.getElementById(id);

// ---- the API ------------------------------------------------------------------------------

function askToken(message) {
  if (tokenPrompt) return tokenPrompt;
  tokenPrompt = new Promise((resolve) => {
    const dialog = $("token-dialog");
    $("token-error").textContent = message;
    $("token-error").hidden = !message;
    $("token").value = "";
    $("token-form").onsubmit = (event) => {
      event.preventDefault();
      token = $("token").value.trim();
      sessionStorage.setItem(TOKEN_KEY, token);
      dialog.close();
      tokenPrompt = null;
      resolve();
    };
    dialog.showModal();
  });
  return tokenPrompt;
}

// fetch() on this origin with the token; a 401 asks for the token and tries again.
async function api(path, options = {}) {
  for (;;) {
    const headers = new Headers(options.headers || {});
    if (token) headers.set("Authorization", "Bearer " + token);
    const res = await fetch(path, { ...options, headers, cache: "no-store", credentials: "same-origin" });
    if (res.status !== 401) return res;
    await askToken(token ? "That token was refused." : "");
  }
}

// The API's error message for a failed response ({"error": {"kind", "message"}}).
async function errorText(res) {
  try {
    const body = await res.json();
    if (body && body.error && body.error.message) return body.error.message;
  } catch (_) { /* not JSON */ }
  return `${res.status} ${res.statusText}`;
}

const jobPath = (id) => "/v1/jobs/" + encodeURIComponent(id);

// ---- one job in the queue -----------------------------------------------------------------

class Job {
  constructor(id, prompt, atTop) {
    this.id = id;
    this.state = "queued";
    this.el = $("job-template").content.firstElementChild.cloneNode(true);
    this.el.dataset.id = id;
    this.q = (cls) => this.el.querySelector("." + cls);
    this.q("prompt").textContent = prompt || "(no prompt)";
    this.q("cancel").addEventListener("click", () => this.cancel());
    this.previewUrl = null;
    this.videoUrl = null;
    this.live = false;  // playLive started
    this.previewStep = -1;  // the step of the preview image shown
    this.watching = false;
    const list = $("jobs");
    if (atTop) list.prepend(this.el); else list.append(this.el);
    $("queue-empty").hidden = true;
  }

  // Fields of GET /v1/jobs/{id}, of a list item, or of the event stream's final event.
  // A job's state only moves forward: an answer that left the server before the job ended (a
  // DELETE's 202, a list page) must not take back the end the event stream already showed.
  update(info, source) {
    const progress = info.progress || {};
    const state = progress.state || info.status || info.state || this.state;
    if (TERMINAL.has(this.state) && !TERMINAL.has(state)) return;
    this.setState(state, progress.step ?? info.step ?? 0, progress.total ?? info.total ?? 0);
    if (info.error && info.error.message) this.showError(info.error.message);
    else if (info.message && TERMINAL.has(state) && state !== "done") this.showError(info.message);
    if (state === "done" && !this.videoUrl) this.loadVideo(info.output_name);
    this.reportShown(source, info);
  }

  setState(state, step, total) {
    this.state = state;
    const badge = this.q("state");
    badge.textContent = state;
    badge.dataset.state = state;
    const bar = this.el.querySelector("progress");
    let value = STAGE_SHARE[state] ?? (TERMINAL.has(state) ? bar.value : 0);
    if (state === "denoise" && total > 0) value = 0.05 + 0.85 * (step / total);
    if (state !== "done" && TERMINAL.has(state)) value = bar.value;  // stays where it stopped
    bar.value = Math.max(bar.value, Math.min(1, value));
    this.q("detail").textContent = state === "denoise" && total > 0 ? `step ${step} of ${total}` : "";
    this.q("cancel").hidden = TERMINAL.has(state);
  }

  showError(message) {
    const e = this.q("error");
    e.textContent = message;
    e.hidden = false;
  }

  async cancel() {
    this.q("cancel").disabled = true;
    try {
      const res = await api(jobPath(this.id), { method: "DELETE" });
      if (!res.ok) this.showError(await errorText(res));
      else this.update(await res.json(), "cancel");
      if (!TERMINAL.has(this.state)) this.watch();  // the stream tells when the cancel lands
    } catch (err) {
      this.showError(String(err));
    } finally {
      this.q("cancel").disabled = false;
    }
  }

  // Shows the job's latest preview. An answer for an older step than the one shown is dropped,
  // but a newer one is shown even if more previews were announced meanwhile: waiting for the
  // answer to the latest announcement would show nothing while steps outpace the round trip.
  async showPreview(step) {
    const res = await api(jobPath(this.id) + "/preview");
    if (!res.ok) return this.report("job-preview", { step, shown: false, reason: `${res.status}` });
    const blob = await res.blob();
    const at = Number((res.headers.get("X-Vgen-Preview-Step") || "").split("/")[0]) || step;
    let width = 0;
    try {  // decoded before it is shown: the report says what the page shows, not what may load
      const bitmap = await createImageBitmap(blob);
      width = bitmap.width;
      bitmap.close();
    } catch (_) {
      return this.report("job-preview", { step: at, shown: false, reason: "not an image" });
    }
    if (this.videoUrl) return this.report("job-preview", { step: at, shown: false, reason: "video" });
    if (at <= this.previewStep) return this.report("job-preview", { step: at, shown: false, reason: "older" });
    const url = URL.createObjectURL(blob);
    const img = this.q("preview");
    if (this.previewUrl) URL.revokeObjectURL(this.previewUrl);
    this.previewUrl = url;
    this.previewStep = at;
    img.src = url;
    img.dataset.step = String(at);
    img.hidden = false;
    this.report("job-preview", { step: at, shown: true, reason: "", width });
  }

  reportShown(name, data) {
    this.report("job-event", {
      name, data, state: this.state, value: this.el.querySelector("progress").value, text: this.q("detail").textContent,
    });
  }

  // Tells listeners what the page has just rendered (see the header).
  report(type, detail) {
    this.el.dispatchEvent(new CustomEvent(type, { bubbles: true, detail: { id: this.id, ...detail } }));
  }

  async loadVideo(outputName) {
    this.videoUrl = "loading";
    const res = await api(jobPath(this.id) + "/video");
    if (!res.ok) {
      this.videoUrl = null;
      this.showError(await errorText(res));
      return;
    }
    const blob = await res.blob();
    this.videoUrl = URL.createObjectURL(blob);
    const live = this.q("live");  // the file takes over from the live stream
    live.pause();
    live.hidden = true;
    const video = this.q("video");
    video.src = this.videoUrl;
    video.hidden = false;
    this.q("preview").hidden = true;
    const link = this.q("download");
    link.href = this.videoUrl;
    link.download = outputName || this.id;
    link.hidden = false;
    // With its sound (a family with sound muxes it into the mp4/webm); a browser that refuses
    // autoplay with sound before any user gesture gets it muted, and the controls unmute it.
    video.muted = false;
    video.play().catch(() => {
      video.muted = true;
      video.play().catch(() => { /* autoplay refused: the controls remain */ });
    });
  }

  // Plays the job's video while it is encoded (GET /v1/jobs/{id}/video?live=1: fragmented MP4)
  // in the "live" <video> through Media Source Extensions, until the finished file replaces it.
  // Does nothing where MSE is missing, or when the answer is the finished file (not fragmented).
  async playLive() {
    if (this.live || !window.MediaSource) return;
    this.live = true;
    let bytes = 0;
    let buffered = () => 0;
    const stop = (reason) => this.report("job-live", { ended: true, bytes, buffered: buffered(), reason });
    const res = await api(jobPath(this.id) + "/video?live=1");
    if (!res.ok || !res.body) return stop(`HTTP ${res.status}`);
    const reader = res.body.getReader();
    let head = new Uint8Array(0);
    let boxes = [];
    while (!boxes.some((b) => b.type === "moov" && b.complete)) {  // the init segment names the codec
      const { value, done } = await reader.read();
      if (done) return stop("the stream ended before its init segment");
      head = concatBytes(head, value);
      boxes = boxHeaders(head);
    }
    // A family with sound streams a second track (AAC): MSE refuses an init segment with a
    // track its type does not name, so the type names both ("avc1.64001e,mp4a.40.2").
    const video = avcCodec(head);
    const audio = aacCodec(head);
    const codec = audio === null ? "" : [video, audio].filter(Boolean).join(",");
    const after = boxes[boxes.findIndex((b) => b.type === "moov") + 1];
    const type = `video/mp4; codecs="${codec}"`;
    if (!video || !codec || (after && after.type === "mdat") || !MediaSource.isTypeSupported(type)) {
      reader.cancel().catch(() => {});
      return stop(after && after.type === "mdat" ? "the finished file, not a stream" : `cannot play ${type}`);
    }
    const source = new MediaSource();
    const player = this.q("live");
    const url = URL.createObjectURL(source);
    player.src = url;
    await new Promise((resolve) => source.addEventListener("sourceopen", resolve, { once: true }));
    URL.revokeObjectURL(url);  // attached: the URL is not needed any more (not kept for the page's life)
    const buffer = source.addSourceBuffer(type);
    const append = (chunk) => new Promise((resolve, reject) => {
      buffer.addEventListener("updateend", resolve, { once: true });
      buffer.addEventListener("error", reject, { once: true });
      buffer.appendBuffer(chunk);
    });
    // Seconds held, from the first frame to the last (the stream's first frame may not be at 0).
    buffered = () => (buffer.buffered.length ? buffer.buffered.end(buffer.buffered.length - 1) - buffer.buffered.start(0) : 0);
    // Read to its end even when the finished file came first (a busy machine, a short job): the
    // stream is finite, and the file, not the stream, is what is shown then.
    player.hidden = Boolean(this.videoUrl);
    try {
      await append(head);
      bytes += head.length;
      if (!this.videoUrl) player.play().catch(() => { /* autoplay refused: it is muted, so this is rare */ });
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        await append(value);
        bytes += value.length;
        this.report("job-live", { bytes, buffered: buffered() });
      }
      this.report("job-live", { ended: true, bytes, buffered: buffered(), mime: type });
      if (source.readyState === "open") source.endOfStream();
    } catch (err) {
      player.hidden = true;  // the finished file still comes when the job is done
      stop(`stopped: ${err}`);
    }
    reader.cancel().catch(() => {});
  }

  // Reads GET /v1/jobs/{id}/events until the job ends; reconnects if the stream drops first.
  async watch() {
    if (this.watching) return;
    this.watching = true;
    try {
      while (!TERMINAL.has(this.state)) {
        try {
          await this.readEvents();
        } catch (_) { /* dropped: ask for the status below */ }
        if (TERMINAL.has(this.state)) break;
        const res = await api(jobPath(this.id));
        if (res.status === 404) break;
        if (res.ok) this.update(await res.json(), "status");
        if (!TERMINAL.has(this.state)) await new Promise((r) => setTimeout(r, 1000));
      }
    } finally {
      this.watching = false;
    }
  }

  async readEvents() {
    const res = await api(jobPath(this.id) + "/events", { headers: { Accept: "text/event-stream" } });
    if (!res.ok) throw new Error(await errorText(res));
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r\n/g, "\n");
      for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
        this.onEvent(parseEvent(buffer.slice(0, end)));
        buffer = buffer.slice(end + 2);
      }
    }
  }

  onEvent({ name, data }) {
    let info;
    try { info = JSON.parse(data); } catch (_) { return; }
    if (name === "preview") {
      this.reportShown(name, info);
      this.showPreview(info.step).catch(() => {});
    } else {
      this.update(info, name);  // progress, or done | failed | cancelled: the job's final status
    }
  }
}

// ---- fragmented MP4, as far as playLive needs it -------------------------------------------

function concatBytes(a, b) {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

// The top-level boxes whose headers `bytes` holds: [{type, complete}].
function boxHeaders(bytes) {
  const out = [];
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let at = 0; at + 8 <= bytes.length;) {
    const size = view.getUint32(at);
    const type = String.fromCharCode(...bytes.subarray(at + 4, at + 8));
    out.push({ type, complete: size >= 8 && at + size <= bytes.length });
    if (size < 8) break;
    at += size;
  }
  return out;
}

// "avc1.PPCCLL" from the avcC box of an init segment (profile, constraints, level); "" if none.
function avcCodec(bytes) {
  for (let i = 0; i + 8 <= bytes.length; i++) {
    if (bytes[i] === 0x61 && bytes[i + 1] === 0x76 && bytes[i + 2] === 0x63 && bytes[i + 3] === 0x43) {
      const hex = (n) => n.toString(16).padStart(2, "0");
      return "avc1." + hex(bytes[i + 5]) + hex(bytes[i + 6]) + hex(bytes[i + 7]);
    }
  }
  return "";
}

// "mp4a.40.N" for an AAC track of an init segment (N: the audio object type its esds box's
// AudioSpecificConfig names, 2 for AAC-LC, what vgen writes); "" when there is no mp4a track;
// null when there is one whose esds cannot be read (the stream cannot be described then).
function aacCodec(bytes) {
  const find = (name, from) => {
    for (let i = from; i + 4 <= bytes.length; i++)
      if (String.fromCharCode(bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]) === name) return i;
    return -1;
  };
  const entry = find("mp4a", 0);
  if (entry < 0) return "";
  const esds = find("esds", entry);
  if (esds < 0) return null;
  // MPEG-4 descriptors (ISO 14496-1): a tag byte, a length in 7-bit groups, then the payload.
  // ES_Descriptor (3) holds DecoderConfigDescriptor (4), which holds DecoderSpecificInfo (5).
  let at = esds + 8;  // past "esds", version and flags
  const descriptor = () => {
    const tag = bytes[at++];
    let length = 0;
    for (let n = 0; n < 4; n++) {
      const b = bytes[at++];
      length = (length << 7) | (b & 0x7f);
      if (!(b & 0x80)) break;
    }
    return { tag, length };
  };
  if (descriptor().tag !== 3) return null;
  const flags = bytes[at + 2];
  at += 3;  // ES_ID, flags
  if (flags & 0x80) at += 2;  // dependsOn_ES_ID
  if (flags & 0x40) at += 1 + bytes[at];  // URL
  if (flags & 0x20) at += 2;  // OCR_ES_ID
  if (descriptor().tag !== 4) return null;
  const objectType = bytes[at];
  at += 13;  // objectTypeIndication, streamType, bufferSize, maxBitrate, avgBitrate
  if (objectType !== 0x40 || descriptor().tag !== 5 || at >= bytes.length) return null;
  return "mp4a.40." + (bytes[at] >> 3);
}

// One Server-Sent Event block: its event name and its data lines joined.
function parseEvent(block) {
  let name = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) name = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
  }
  return { name, data: data.join("\n") };
}

// ---- the queue ------------------------------------------------------------------------------

function track(info, atTop, source) {
  let job = jobs.get(info.id);
  if (!job) {
    job = new Job(info.id, info.spec && info.spec.prompt, atTop);
    jobs.set(info.id, job);
  }
  job.update(info, source);
  if (!TERMINAL.has(job.state)) job.watch();
  return job;
}

async function loadJobs(cursor) {
  const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
  if (cursor) query.set("cursor", cursor);
  const res = await api("/v1/jobs?" + query);
  const problem = $("queue-error");
  if (!res.ok) {
    problem.textContent = await errorText(res);
    problem.hidden = false;
    return;
  }
  problem.hidden = true;
  const page = await res.json();
  if (cursor) page.jobs.forEach((info) => track(info, false, "list"));
  else [...page.jobs].reverse().forEach((info) => { if (!jobs.has(info.id)) track(info, true, "list"); });
  if (cursor || nextCursor === null) nextCursor = page.next_cursor;
  $("more").hidden = !nextCursor;
}

// ---- the form -------------------------------------------------------------------------------

const models = new Map();  // id -> what GET /v1/models says of it ({image: none|optional|required, ...})

// The model picker (shown when the service has several models) and, for the chosen model, the
// image upload (shown when it takes an image; marked when it needs one).
async function loadModels() {
  const res = await api("/v1/models");
  if (!res.ok) return;
  const list = (await res.json()).data || [];
  const select = $("model");
  select.replaceChildren();
  models.clear();
  for (const m of list) {
    models.set(m.id, m.vgen || {});
    const option = document.createElement("option");
    option.value = m.id;
    option.textContent = m.id;  // text, never markup
    select.append(option);
  }
  $("model-field").hidden = list.length < 2;
  showImageField();
}

function showImageField() {
  const use = (models.get($("model").value) || {}).image || "none";
  $("image-field").hidden = use === "none";
  $("image").required = use === "required";
  $("image-label").textContent = use === "required" ? "Image (this model needs one)" : "Image (optional)";
}

// The LoRAs of the service's folder; the picker stays hidden when there are none.
async function loadLoras() {
  const res = await api("/v1/loras");
  if (!res.ok) return;
  const list = (await res.json()).data || [];
  const select = $("lora");
  for (const l of list) {
    const option = document.createElement("option");
    option.value = l.name;
    option.textContent = l.name;
    select.append(option);
  }
  $("lora-field").hidden = list.length === 0;
  $("lora-scale-field").hidden = list.length === 0;
}

function specFromForm() {
  const spec = { prompt: $("prompt").value };
  if (!$("model-field").hidden && $("model").value) spec.model = $("model").value;
  const text = (id) => $(id).value.trim();
  if (text("negative_prompt")) spec.negative_prompt = $("negative_prompt").value;
  for (const id of ["width", "height", "frames", "steps", "seed"]) if (text(id) !== "") spec[id] = Number(text(id));
  if (text("guidance") !== "") spec.guidance = Number(text("guidance"));
  if (text("scheduler")) spec.scheduler = text("scheduler");
  // The post-stages (after decode): absent for "none", so such a job is the job without them.
  for (const id of ["interpolate", "upscale"]) if (text(id)) spec[id] = Number(text(id));
  if (text("priority") !== "") spec.priority = Number(text("priority"));
  if (!$("lora-field").hidden && text("lora")) {
    spec.loras = [{ name: text("lora"), scale: text("lora_scale") === "" ? 1 : Number(text("lora_scale")) }];
  }
  spec.format = text("format") || "mp4";
  return spec;
}

// The request for a spec: JSON, or multipart/form-data with the spec as a "spec" part and the
// chosen image as an "image" part (the browser sets the boundary).
function submission(spec) {
  const file = !$("image-field").hidden && $("image").files[0];
  if (!file) return { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(spec) };
  const form = new FormData();
  form.append("spec", JSON.stringify(spec));
  form.append("image", file, file.name);
  return { method: "POST", body: form };
}

async function submitJob(event) {
  event.preventDefault();
  const button = $("submit");
  const problem = $("form-error");
  problem.hidden = true;
  button.disabled = true;
  try {
    const spec = specFromForm();
    const res = await api("/v1/jobs", submission(spec));
    if (!res.ok) {
      problem.textContent = await errorText(res);
      problem.hidden = false;
      return;
    }
    const accepted = await res.json();
    const job = track({ id: accepted.id, status: accepted.status, spec }, true, "submitted");
    if (!TERMINAL.has(job.state)) job.playLive().catch(() => {});  // the video while it is made
  } catch (err) {
    problem.textContent = String(err);
    problem.hidden = false;
  } finally {
    button.disabled = false;
  }
}

function start() {
  $("job-form").addEventListener("submit", submitJob);
  $("more").addEventListener("click", () => loadJobs(nextCursor));
  $("model").addEventListener("change", showImageField);
  loadModels().catch(() => {});
  loadLoras().catch(() => {});
  loadJobs(null).catch((err) => { $("service-state").textContent = String(err); });
  // Jobs submitted elsewhere (curl, another tab) appear within a few seconds.
  setInterval(() => loadJobs(null).catch(() => {}), 5000);
}

start();
