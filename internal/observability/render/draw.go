package render

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/color/palette"
	imgdraw "image/draw"
	"image/png"
	"math"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Page is what Draw puts around the panels: the dashboard's title, a caption saying where the
// pictures come from, and the range the panels cover.
type Page struct {
	Title   string
	Caption string
	Range   Range
}

// Sizes of the picture, in pixels: the dashboard's 24 columns across Width, each grid row
// (Grafana's 30 px) RowHeight tall, below a header.
const (
	dpi       = 96
	Width     = 1500
	RowHeight = 30
	header    = 70
	gap       = 4
)

// px is n pixels as a vg length at dpi.
func px(n float64) vg.Length { return vg.Length(n * 72 / dpi) }

var (
	pageBackground  = color.RGBA{R: 0xee, G: 0xf0, B: 0xf2, A: 0xff}
	panelBackground = color.White
	grey            = color.RGBA{R: 0x55, G: 0x5b, B: 0x66, A: 0xff}
)

// style is the text style of size points in c.
func style(size float64, c color.Color) text.Style {
	return text.Style{Color: c, Font: font.From(plot.DefaultFont, vg.Length(size)), Handler: plot.DefaultTextHandler}
}

// Draw lays results out as the dashboard does (each panel at its grid position; a row header as a
// heading) and returns the picture as a PNG. Panels whose queries returned no series say
// "no data", as Grafana does.
func Draw(page Page, results []Result) ([]byte, error) {
	rows := 0
	for _, r := range results {
		rows = max(rows, r.Panel.Grid.Y+r.Panel.Grid.H)
	}
	hpx := float64(header + rows*RowHeight + gap)
	c := vgimg.NewWith(vgimg.UseWH(px(Width), px(hpx)), vgimg.UseDPI(dpi), vgimg.UseBackgroundColor(pageBackground))
	dc := draw.New(c)
	top := dc.Max.Y
	title := style(18, color.Black)
	title.YAlign = draw.YTop
	dc.FillText(title, vg.Point{X: px(12), Y: top - px(10)}, page.Title)
	capt := style(10, grey)
	capt.YAlign = draw.YTop
	dc.FillText(capt, vg.Point{X: px(12), Y: top - px(38)}, page.Caption)
	col := float64(Width) / 24
	for _, r := range results {
		g := r.Panel.Grid
		x0, x1 := float64(g.X)*col+gap, float64(g.X+g.W)*col-gap
		y0 := float64(header + g.Y*RowHeight + gap)
		y1 := float64(header+(g.Y+g.H)*RowHeight) - gap
		area := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: px(x0), Y: top - px(y1)},
			Max: vg.Point{X: px(x1), Y: top - px(y0)},
		}}
		if r.Panel.Type == "row" {
			h := style(13, color.Black)
			h.YAlign = draw.YCenter
			area.FillText(h, vg.Point{X: area.Min.X + px(8), Y: (area.Min.Y + area.Max.Y) / 2}, r.Panel.Title)
			continue
		}
		if err := drawPanel(area, r, page.Range); err != nil {
			return nil, fmt.Errorf("panel %q: %w", r.Panel.Title, err)
		}
	}
	return encode(c.Image())
}

// encode writes img as a PNG of 256 colours (the web-safe palette and greys), which keeps a
// dashboard of line charts small.
func encode(img image.Image) ([]byte, error) {
	pal := append(color.Palette{}, palette.WebSafe...)
	for g := 0; g < 256 && len(pal) < 256; g += 8 {
		pal = append(pal, color.Gray{Y: uint8(g)})
	}
	pal = append(pal, pageBackground)
	p := image.NewPaletted(img.Bounds(), pal)
	imgdraw.Draw(p, p.Rect, img, img.Bounds().Min, imgdraw.Src)
	var b bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(&b, p); err != nil {
		return nil, fmt.Errorf("png: %w", err)
	}
	return b.Bytes(), nil
}

// legendEntry is one series' name and colour under a panel.
type legendEntry struct {
	name   string
	c      color.Color
	dashes []vg.Length
}

// drawPanel draws one panel's series in area: a white card, the title, the lines and the legend.
func drawPanel(area draw.Canvas, r Result, rng Range) error {
	area.FillPolygon(panelBackground, []vg.Point{area.Min, {X: area.Max.X, Y: area.Min.Y}, area.Max, {X: area.Min.X, Y: area.Max.Y}})
	p := plot.New()
	p.Title.Text = r.Panel.Title
	if r.Panel.Type == "stat" {
		p.Title.Text += statSuffix(r)
	}
	p.Title.TextStyle.Font.Size = vg.Length(11)
	p.Title.Padding = px(6)
	p.X.Min, p.X.Max = float64(rng.Start.Unix()), float64(rng.End.Unix())
	p.X.Tick.Marker = timeTicks{format: timeFormat(rng)}
	p.Y.Tick.Marker = unitTicks{unit: r.Panel.Unit}
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Tick.Label.Font.Size = vg.Length(8)
		a.Tick.Label.Color = grey
	}
	p.Add(plotter.NewGrid())
	var legend []legendEntry
	for i, s := range r.Series {
		col := plotutil.Color(i)
		dashes := plotutil.Dashes(i / len(plotutil.DefaultColors))
		lines := segments(s.Points)
		for _, seg := range lines {
			l, err := plotter.NewLine(seg)
			if err != nil {
				return err
			}
			l.Color, l.Width, l.Dashes = col, px(1.5), dashes
			p.Add(l)
			if len(seg) == 1 {
				sc, err := plotter.NewScatter(seg)
				if err != nil {
					return err
				}
				sc.Color, sc.Radius = col, px(1.5)
				p.Add(sc)
			}
		}
		if len(lines) > 0 {
			legend = append(legend, legendEntry{name: s.Name, c: col, dashes: dashes})
		}
	}
	if len(legend) == 0 {
		p.HideY()
		msg := style(12, grey)
		msg.XAlign, msg.YAlign = draw.XCenter, draw.YCenter
		p.Draw(area)
		area.FillText(msg, area.Center(), "no data")
		return nil
	}
	p.Y.Min, p.Y.Max = yRange(p.Y.Min, p.Y.Max, r.Panel.Unit)
	lh := drawLegend(area, legend)
	p.Draw(draw.Crop(area, 0, 0, lh, 0))
	return nil
}

// timeFormat labels the time axis in minutes, or in seconds for a range under ten minutes.
func timeFormat(r Range) string {
	if r.End.Sub(r.Start) < 10*time.Minute {
		return "15:04:05"
	}
	return "15:04"
}

// yRange is the value axis's range for data from lo to hi: from 0 when nothing is negative
// (a ratio near 100% keeps its own lower bound), and a flat series drawn inside the range rather
// than on an axis stretched around it ([0, 1] for zeros, [0, 1] for a ratio up to 100%, else from
// 0 to a quarter above the value).
func yRange(lo, hi float64, unit string) (float64, float64) {
	switch {
	case lo == hi && lo == 0:
		return 0, 1
	case lo == hi && unit == "percentunit" && lo > 0 && lo <= 1:
		return 0, 1
	case lo == hi && lo > 0:
		return 0, 1.25 * hi
	case lo == hi:
		return 1.25 * lo, 0
	case lo >= 0 && unit != "percentunit":
		return 0, hi
	}
	return lo, hi
}

// timeTicks puts the time axis's labels on round times (every 10 s ... 1 h), five to ten of them.
type timeTicks struct{ format string }

// Ticks implements plot.Ticker.
func (tt timeTicks) Ticks(lo, hi float64) []plot.Tick {
	steps := []float64{10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400}
	step := steps[len(steps)-1]
	for _, s := range steps {
		if (hi-lo)/s <= 8 {
			step = s
			break
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: time.Unix(int64(v), 0).UTC().Format(tt.format)})
		for m := 1; m < 5; m++ {
			if minor := v + float64(m)*step/5; minor <= hi {
				ticks = append(ticks, plot.Tick{Value: minor})
			}
		}
	}
	return ticks
}

// statSuffix is a stat panel's value as Grafana shows it: the last value of each series.
func statSuffix(r Result) string {
	var parts []string
	for _, s := range r.Series {
		for i := len(s.Points) - 1; i >= 0; i-- {
			if v := s.Points[i].V; !math.IsNaN(v) {
				parts = append(parts, formatUnit(r.Panel.Unit, v, 4))
				break
			}
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ", ") + " at the end"
}

// segments splits points into runs without NaN or infinities (which a line cannot draw), as
// Grafana leaves a gap where a series has no value.
func segments(points []Point) []plotter.XYs {
	var out []plotter.XYs
	var cur plotter.XYs
	for _, pt := range points {
		if math.IsNaN(pt.V) || math.IsInf(pt.V, 0) {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, plotter.XY{X: float64(pt.T.Unix()) + float64(pt.T.Nanosecond())/1e9, Y: pt.V})
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// drawLegend writes the entries along the bottom of area, left to right, wrapping, and returns
// the height it used.
func drawLegend(area draw.Canvas, entries []legendEntry) vg.Length {
	sty := style(8, color.Black)
	sty.YAlign = draw.YCenter
	lineH := px(14)
	swatch := px(14)
	var rows [][]legendEntry
	var rowW vg.Length
	maxW := area.Max.X - area.Min.X - px(16)
	for _, e := range entries {
		w := swatch + px(4) + sty.Width(e.name) + px(12)
		if len(rows) == 0 || rowW+w > maxW {
			rows = append(rows, nil)
			rowW = 0
		}
		rows[len(rows)-1] = append(rows[len(rows)-1], e)
		rowW += w
	}
	h := vg.Length(len(rows))*lineH + px(6)
	for i, row := range rows {
		y := area.Min.Y + h - px(3) - (vg.Length(i)+0.5)*lineH
		x := area.Min.X + px(8)
		for _, e := range row {
			area.StrokeLine2(draw.LineStyle{Color: e.c, Width: px(3), Dashes: e.dashes}, x, y, x+swatch, y)
			area.FillText(sty, vg.Point{X: x + swatch + px(4), Y: y}, e.name)
			x += swatch + px(4) + sty.Width(e.name) + px(12)
		}
	}
	return h
}

// unitTicks labels an axis's ticks in a Grafana unit.
type unitTicks struct{ unit string }

// Ticks implements plot.Ticker.
func (u unitTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = formatUnit(u.unit, ticks[i].Value, 3)
		}
	}
	return ticks
}

// formatUnit writes v in unit with prec significant digits: percentunit as %, s as s/ms/µs,
// bytes in binary multiples, ops and reqps per second, anything else as a short number.
func formatUnit(unit string, v float64, prec int) string {
	switch unit {
	case "percentunit":
		return trimNum(v*100, prec) + "%"
	case "s":
		switch a := math.Abs(v); {
		case a == 0 || a >= 1:
			return trimNum(v, prec) + " s"
		case a >= 1e-3:
			return trimNum(v*1e3, prec) + " ms"
		default:
			return trimNum(v*1e6, prec) + " µs"
		}
	case "bytes":
		for _, m := range []struct {
			div  float64
			name string
		}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
			if math.Abs(v) >= m.div {
				return trimNum(v/m.div, prec) + " " + m.name
			}
		}
		return trimNum(v, prec) + " B"
	case "ops", "reqps":
		return short(v, prec) + "/s"
	default:
		return short(v, prec)
	}
}

// short writes v with k, M, G for thousands, millions, billions.
func short(v float64, prec int) string {
	for _, m := range []struct {
		div  float64
		name string
	}{{1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if math.Abs(v) >= m.div {
			return trimNum(v/m.div, prec) + m.name
		}
	}
	return trimNum(v, prec)
}

// trimNum is v with at most prec significant digits and no exponent.
func trimNum(v float64, prec int) string {
	if v == 0 {
		return "0"
	}
	digits := prec - 1 - int(math.Floor(math.Log10(math.Abs(v))))
	out := fmt.Sprintf("%.*f", max(digits, 0), v)
	if strings.Contains(out, ".") {
		out = strings.TrimRight(strings.TrimRight(out, "0"), ".")
	}
	return out
}

// Caption is the caption the pictures carry: what drew them, from what, over which run.
func Caption(source string, r Range) string {
	return fmt.Sprintf("Panels of %s evaluated by Prometheus over %s – %s UTC (step %s) and drawn by internal/observability/render, not a Grafana screenshot.",
		source, r.Start.UTC().Format("2006-01-02 15:04:05"), r.End.UTC().Format("15:04:05"), r.Step)
}
