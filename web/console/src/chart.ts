// Sparklines: a small SVG polyline of a metric's history. Hand-drawn
// rather than a chart library: a few lines of SVG, no styles injected.

const svgNS = "http://www.w3.org/2000/svg";

/** sparkline draws values (each 0..max) into a width×height SVG. */
export function sparkline(values: number[], max: number, width = 120, height = 28, label = ""): SVGSVGElement {
  const svg = document.createElementNS(svgNS, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", String(width));
  svg.setAttribute("height", String(height));
  svg.setAttribute("class", "spark");
  svg.setAttribute("role", "img");
  if (label) svg.setAttribute("aria-label", label);
  const base = document.createElementNS(svgNS, "line");
  base.setAttribute("x1", "0");
  base.setAttribute("x2", String(width));
  base.setAttribute("y1", String(height - 0.5));
  base.setAttribute("y2", String(height - 0.5));
  base.setAttribute("class", "spark-base");
  svg.appendChild(base);
  if (values.length > 0 && max > 0) {
    const step = values.length > 1 ? width / (values.length - 1) : 0;
    const pts = values.map((v, i) => {
      const y = height - 1 - (Math.min(Math.max(v, 0), max) / max) * (height - 2);
      return `${(i * step).toFixed(1)},${y.toFixed(1)}`;
    });
    const line = document.createElementNS(svgNS, "polyline");
    line.setAttribute("points", pts.join(" "));
    line.setAttribute("class", "spark-line");
    svg.appendChild(line);
  }
  return svg;
}
