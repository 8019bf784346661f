// A file browser over envd: Filesystem/ListDir lists, GET /files
// downloads, POST /files (multipart, as E2B's SDKs send it) uploads with
// the progress XMLHttpRequest reports.
import type { Envd } from "./envd";
import { bytes, clear, errorBox, h } from "./dom";
import { FileType } from "./gen/filesystem/filesystem_pb";

/** fileBrowser shows the directory dir of the sandbox in el. */
export function fileBrowser(envd: Envd, el: HTMLElement, start: string): void {
  let dir = start;
  const pathInput = h("input", { type: "text", value: dir, "aria-label": "directory", class: "path" });
  const listing = h("div", { class: "listing" });
  const progress = h("progress", { max: 100, value: 0, class: "upload-progress", hidden: true });
  const status = h("span", { class: "muted upload-status" });
  const fileInput = h("input", { type: "file", "aria-label": "upload a file" });
  fileInput.addEventListener("change", () => {
    const f = fileInput.files?.[0];
    if (f) upload(f);
  });

  const go = (d: string) => {
    dir = d.replace(/\/+$/, "") || "/";
    pathInput.value = dir;
    void list();
  };
  pathInput.addEventListener("keydown", (e) => {
    if (e.key === "Enter") go(pathInput.value);
  });

  async function list(): Promise<void> {
    try {
      const resp = await envd.fs.listDir({ path: dir, depth: 1 });
      const entries = [...resp.entries].sort((a, b) => Number(b.type === FileType.DIRECTORY) - Number(a.type === FileType.DIRECTORY) || a.name.localeCompare(b.name));
      const rows = entries.map((e) => {
        const isDir = e.type === FileType.DIRECTORY;
        const name = isDir
          ? h("a", { href: "#", class: "dir", onclick: (ev: Event) => (ev.preventDefault(), go(e.path)) }, e.name + "/")
          : h("a", { href: "#", class: "file", "data-path": e.path, onclick: (ev: Event) => (ev.preventDefault(), void download(e.path, e.name)) }, e.name);
        return h("tr", { "data-name": e.name }, h("td", {}, name), h("td", { class: "num" }, isDir ? "" : bytes(Number(e.size))), h("td", { class: "muted" }, e.permissions), h("td", { class: "muted" }, e.owner));
      });
      const up = dir === "/" ? null : h("tr", {}, h("td", {}, h("a", { href: "#", onclick: (ev: Event) => (ev.preventDefault(), go(dir.replace(/\/[^/]*$/, "") || "/")) }, "../")));
      clear(listing, h("table", { class: "files" }, h("thead", {}, h("tr", {}, h("th", {}, "name"), h("th", {}, "size"), h("th", {}, "mode"), h("th", {}, "owner"))), h("tbody", {}, up, ...rows)));
    } catch (err) {
      clear(listing, errorBox(err));
    }
  }

  async function download(path: string, name: string): Promise<void> {
    status.textContent = `downloading ${name}…`;
    try {
      const resp = await fetch(envd.filesURL(path), { headers: envd.headers(), cache: "no-store" });
      if (!resp.ok) throw new Error(`download: ${resp.status} ${await resp.text()}`);
      const url = URL.createObjectURL(await resp.blob());
      const a = h("a", { href: url, download: name, hidden: true });
      document.body.appendChild(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
      status.textContent = `downloaded ${name}`;
    } catch (err) {
      status.textContent = err instanceof Error ? err.message : String(err);
    }
  }

  function upload(f: File): void {
    const target = `${dir === "/" ? "" : dir}/${f.name}`;
    const form = new FormData();
    // E2B's multipart upload: field "file", its file name the full path.
    form.append("file", f, target);
    const xhr = new XMLHttpRequest();
    xhr.open("POST", envd.filesURL(target));
    for (const [k, v] of Object.entries(envd.headers())) xhr.setRequestHeader(k, v);
    progress.hidden = false;
    progress.value = 0;
    status.textContent = `uploading ${f.name}…`;
    xhr.upload.addEventListener("progress", (e) => {
      if (e.lengthComputable) {
        progress.value = Math.round((e.loaded / e.total) * 100);
        status.textContent = `uploading ${f.name}: ${bytes(e.loaded)} of ${bytes(e.total)}`;
      }
    });
    xhr.addEventListener("load", () => {
      if (xhr.status >= 200 && xhr.status < 300) {
        progress.value = 100;
        status.textContent = `uploaded ${target}`;
      } else {
        status.textContent = `upload failed: ${xhr.status} ${xhr.responseText}`;
      }
      fileInput.value = "";
      void list();
    });
    xhr.addEventListener("error", () => {
      status.textContent = "upload failed: the connection broke";
    });
    xhr.send(form);
  }

  clear(
    el,
    h("div", { class: "toolbar" }, pathInput, h("button", { type: "button", onclick: () => go(pathInput.value) }, "Go"), h("button", { type: "button", onclick: () => void list() }, "Refresh"), h("label", { class: "upload" }, "Upload: ", fileInput)),
    h("div", { class: "toolbar" }, progress, status),
    listing,
  );
  void list();
}
