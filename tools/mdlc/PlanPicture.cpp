//===- PlanPicture.cpp - Pictures of what each rank holds -----------------===//

#include "PlanPicture.h"

#include <algorithm>
#include <cstdio>

using namespace mdl;

std::vector<std::pair<int64_t, int64_t>>
mdl::rowsOf(const rt::Piece &p, std::vector<int64_t> shape, int64_t maxRuns) {
  std::vector<std::pair<int64_t, int64_t>> out;
  if (shape.empty())
    return out;
  if (shape.size() == 1)
    shape.push_back(1);
  int64_t row = 1;
  for (size_t i = 1; i < shape.size(); ++i)
    row *= shape[i];
  // Atoms that move between rows, and the rows one step of each moves.
  std::vector<std::pair<int64_t, int64_t>> outer; // (stride in rows, count)
  int64_t innerRows = 1;
  for (size_t a = 0; a < p.stride.size(); ++a) {
    if (p.stride[a] < row)
      continue;
    if (p.stride[a] % row != 0)
      return {};
    outer.push_back({p.stride[a] / row, p.count[a]});
  }
  std::sort(outer.begin(), outer.end());
  // The innermost moving atoms that form one contiguous run of rows.
  size_t k = 0;
  while (k < outer.size() && outer[k].first == innerRows) {
    innerRows *= outer[k].second;
    ++k;
  }
  int64_t starts = 1;
  for (size_t j = k; j < outer.size(); ++j)
    starts *= outer[j].second;
  if (starts > maxRuns)
    return {};
  for (int64_t s = 0; s < starts; ++s) {
    int64_t r = p.base / row, rest = s;
    for (size_t j = outer.size(); j-- > k;) {
      r += (rest % outer[j].second) * outer[j].first;
      rest /= outer[j].second;
    }
    if (!out.empty() && out.back().second == r)
      out.back().second = r + innerRows;
    else
      out.push_back({r, r + innerRows});
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

std::string escape(const std::string &s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

// Tableau 10: distinct for the parts of one fused tensor.
const char *kColours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                          "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                          "#9c755f", "#bab0ac"};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

} // namespace

bool PlanPicture::Tensor::replicated() const {
  if (rows.size() < 2)
    return false;
  auto same = [](const rt::Piece &a, const rt::Piece &b) {
    return a.param == b.param && a.lo == b.lo && a.count == b.count;
  };
  return std::all_of(rows.begin(), rows.end(), [&](const Row &r) {
    return std::equal(r.pieces.begin(), r.pieces.end(),
                      rows[0].pieces.begin(), rows[0].pieces.end(), same);
  });
}

void PlanPicture::add(const std::string &group, const std::string &name,
                      int64_t rank, const std::string &who,
                      const rt::LocalTensor &lt) {
  std::string key = group + "\n" + name;
  auto it = std::find_if(tensors.begin(), tensors.end(),
                         [&](const Tensor &t) { return t.key == key; });
  if (it == tensors.end()) {
    Tensor t;
    t.key = key;
    t.name = name;
    t.copy = m.tensors[lt.spec].copy;
    tensors.push_back(std::move(t));
    it = tensors.end() - 1;
  }
  Tensor &t = *it;
  Row row;
  row.rank = rank;
  row.who = who;
  row.rows = lt.axesShape.empty() ? 1 : lt.axesShape[0];
  std::string shape = "[";
  for (size_t i = 0; i < lt.shape.size(); ++i)
    shape += (i ? ", " : "") + std::to_string(lt.shape[i]);
  t.shape = shape + "]";
  for (const rt::Piece &p : lt.pieces) {
    if (std::find(t.params.begin(), t.params.end(), p.param) == t.params.end())
      t.params.push_back(p.param);
    row.pieces.push_back(p);
    for (const auto &[lo, hi] : rowsOf(p, lt.axesShape, 4096))
      row.segments.push_back({lo, hi, p.param});
  }
  std::sort(row.segments.begin(), row.segments.end(),
            [](const Segment &a, const Segment &b) { return a.lo < b.lo; });
  t.rows.push_back(std::move(row));
}

/// The parameter's name and the ranges of its atoms the rank holds, for
/// the atoms it does not hold whole: "q G 0:2".
std::string PlanPicture::label(const Row &row, int param) const {
  const rt::Param &p = m.params[param];
  std::string out = p.path.substr(p.path.rfind('.') + 1);
  for (const rt::Piece &piece : row.pieces) {
    if (piece.param != param)
      continue;
    for (size_t a = 0; a < p.atoms.size(); ++a)
      if (piece.lo[a] != 0 || piece.count[a] != p.sizes[a])
        out += " " + p.atoms[a] + " " + std::to_string(piece.lo[a]) + ":" +
               std::to_string(piece.lo[a] + piece.count[a]);
    break;
  }
  return out;
}

std::string PlanPicture::diagram() const {
  constexpr int kCells = 64;
  std::string out = title + "\n";
  for (const Tensor &t : tensors) {
    out += "\n" + t.name + " " + t.shape + (t.copy ? " (copy)" : "") +
           (t.replicated() ? " (replicated)" : "") + "\n";
    for (size_t i = 0; i < t.params.size(); ++i)
      out += std::string("  ") + char('a' + i % 26) + " = " +
             m.params[t.params[i]].path + "\n";
    for (const Row &r : t.rows) {
      std::string bar(kCells, '.');
      for (int c = 0; c < kCells; ++c) {
        // The row at the cell's middle.
        int64_t at = (2 * c + 1) * r.rows / (2 * kCells);
        for (const Segment &s : r.segments)
          if (s.lo <= at && at < s.hi) {
            size_t i = std::find(t.params.begin(), t.params.end(), s.param) -
                       t.params.begin();
            bar[c] = char('a' + i % 26);
          }
      }
      out += "  rank " + std::to_string(r.rank) +
             (r.who.empty() ? "" : " (" + r.who + ")") + " |" + bar +
             "| " + std::to_string(r.rows) + " rows\n";
      // What of each part the rank holds, and the first runs of rows.
      std::string holds;
      for (size_t i = 0; i < t.params.size(); ++i)
        holds += std::string(holds.empty() ? "" : ", ") + char('a' + i % 26) +
                 " " + label(r, t.params[i]);
      out += "    holds " + holds + "\n    rows";
      for (size_t k = 0; k < r.segments.size() && k < 12; ++k) {
        const Segment &s = r.segments[k];
        size_t i = std::find(t.params.begin(), t.params.end(), s.param) -
                   t.params.begin();
        out += std::string(" ") + char('a' + i % 26) + " " +
               std::to_string(s.lo) + ":" + std::to_string(s.hi);
      }
      if (r.segments.size() > 12)
        out += " ... (" + std::to_string(r.segments.size()) + " runs)";
      out += "\n";
    }
  }
  return out;
}

std::string PlanPicture::svg() const {
  const double left = 150, barWidth = 640, barHeight = 22, gap = 6,
               width = left + barWidth + 120;
  std::string body;
  double y = 50;
  for (const Tensor &t : tensors) {
    bool replicated = t.replicated();
    body += "<g class=\"tensor\" data-name=\"" + escape(t.name) + "\"" +
            (replicated ? " data-replicated=\"true\"" : "") + ">\n";
    body += "<text class=\"tensor-name\" x=\"10\" y=\"" + num(y) + "\">" +
            escape(t.name + " " + t.shape) + (t.copy ? " (copy)" : "") +
            (replicated ? " \u2014 replicated: every rank holds all of it"
                        : "") +
            "</text>\n";
    y += 8;
    // The legend: one swatch per part.
    double x = 10;
    for (size_t i = 0; i < t.params.size(); ++i) {
      const std::string &path = m.params[t.params[i]].path;
      body += "<rect class=\"swatch\" x=\"" + num(x) + "\" y=\"" + num(y) +
              "\" width=\"12\" height=\"12\" fill=\"" + kColours[i % 10] +
              "\"/><text class=\"legend\" x=\"" + num(x + 16) + "\" y=\"" +
              num(y + 10) + "\">" + escape(path) + "</text>\n";
      x += 24 + 6.5 * path.size();
      if (x > width - 150 && i + 1 < t.params.size()) {
        x = 10;
        y += 16;
      }
    }
    y += 22;
    for (const Row &r : t.rows) {
      body += "<g class=\"rank\" data-rank=\"" + std::to_string(r.rank) +
              "\">\n<text class=\"rank-label\" x=\"10\" y=\"" +
              num(y + 15) + "\">rank " + std::to_string(r.rank) +
              (r.who.empty() ? "" : " (" + escape(r.who) + ")") +
              "</text>\n";
      double scale = r.rows ? barWidth / double(r.rows) : 0;
      body += "<rect class=\"bar\" x=\"" + num(left) + "\" y=\"" + num(y) +
              "\" width=\"" + num(barWidth) + "\" height=\"" + num(barHeight) +
              "\"/>\n";
      for (const Segment &s : r.segments) {
        size_t i = std::find(t.params.begin(), t.params.end(), s.param) -
                   t.params.begin();
        double sx = left + s.lo * scale, sw = (s.hi - s.lo) * scale;
        std::string text = label(r, s.param);
        body += "<rect class=\"part\" data-param=\"" +
                escape(m.params[s.param].path) + "\" data-rows=\"" +
                std::to_string(s.lo) + ":" + std::to_string(s.hi) +
                "\" x=\"" + num(sx) + "\" y=\"" + num(y) + "\" width=\"" +
                num(sw) + "\" height=\"" + num(barHeight) + "\" fill=\"" +
                kColours[i % 10] + "\"><title>" + escape(text) + ", rows " +
                std::to_string(s.lo) + ":" + std::to_string(s.hi) +
                "</title></rect>\n";
        if (sw >= 6.5 * text.size() + 4)
          body += "<text class=\"part-label\" x=\"" + num(sx + sw / 2) +
                  "\" y=\"" + num(y + 15) + "\">" + escape(text) + "</text>\n";
      }
      if (replicated)
        body += "<rect class=\"replicated\" x=\"" + num(left) + "\" y=\"" +
                num(y) + "\" width=\"" + num(barWidth) + "\" height=\"" +
                num(barHeight) + "\" fill=\"url(#hatch)\"/>\n";
      body += "<text class=\"rows\" x=\"" + num(left + barWidth + 8) +
              "\" y=\"" + num(y + 15) + "\">" + std::to_string(r.rows) +
              " rows</text>\n</g>\n";
      y += barHeight + gap;
    }
    body += "</g>\n";
    y += 24;
  }
  std::string out =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) +
      "\" height=\"" + num(y) + "\" viewBox=\"0 0 " + num(width) + " " +
      num(y) + "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<style>.tensor-name{font-weight:bold;font-size:13px}"
      ".part-label{text-anchor:middle;fill:#fff;font-size:11px}"
      ".bar{fill:#eee;stroke:#999}.part{stroke:#fff;stroke-width:0.5}"
      ".rows,.legend,.rank-label{fill:#333}</style>\n"
      "<defs><pattern id=\"hatch\" width=\"8\" height=\"8\" "
      "patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
      "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"8\" stroke=\"#000\" "
      "stroke-opacity=\"0.35\" stroke-width=\"2\"/></pattern></defs>\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n"
      "<text class=\"title\" x=\"10\" y=\"24\" font-size=\"15\" "
      "font-weight=\"bold\">" + escape(title) + "</text>\n";
  return out + body + "</svg>\n";
}
