// Package dnsconfig wires a cluster's own DNS to Octopus: it adds to the cluster's CoreDNS
// configuration a server block that forwards the clusterset.local zone, and the reverse zones
// of the other clusters' endpoint addresses, to octopus-dns, and removes exactly that block
// again. Everything else in the user's Corefile stays untouched,
// byte for byte.
package dnsconfig

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/coredns/caddy/caddyfile"
)

// Zone is the MCS DNS zone (KEP-1645) that octopus-dns answers.
const Zone = "clusterset.local"

// The managed block sits between these two comment lines. Unpatch finds the block by them, so
// they must never change between releases; the begin line also records whether Patch had to
// end the user's last line with a newline, so that Unpatch can restore the original bytes.
const (
	beginMarker        = "# octopus:begin clusterset.local (managed by `octopus join`, removed by `octopus leave`; do not edit)"
	beginMarkerNewline = "# octopus:begin clusterset.local +newline (managed by `octopus join`, removed by `octopus leave`; do not edit)"
	endMarker          = "# octopus:end clusterset.local"
)

// ErrUnparsable wraps every reason a Corefile is refused, so that callers can tell a bad
// Corefile from an API error.
var ErrUnparsable = errors.New("the Corefile cannot be parsed")

// Corefile is what Inspect learned about a Corefile.
type Corefile struct {
	// Managed is true when the Corefile holds Octopus's block.
	Managed bool
	// Reload is true when the root zone's server block enables CoreDNS's reload plugin, which
	// picks up a changed Corefile without a restart.
	Reload bool
	// Zones are the zones of the user's server blocks (not Octopus's), normalised as zoneOf
	// does.
	Zones []string
}

// Inspect parses the Corefile and reports what Patch needs to know. It refuses a Corefile
// that CoreDNS could not load as well as one whose clusterset.local zone is already served by
// a server block of the user's, since Octopus must not take over or shadow it.
func Inspect(corefile string) (Corefile, error) {
	blocks, err := serverBlocks(corefile)
	if err != nil {
		return Corefile{}, err
	}
	begin, end, managed, err := managedBlock(corefile)
	if err != nil {
		return Corefile{}, err
	}
	info := Corefile{Managed: managed}
	for _, b := range blocks {
		if managed && b.offset >= begin && b.offset < end {
			continue // our own block
		}
		for _, k := range b.keys {
			info.Zones = append(info.Zones, zoneOf(k))
			switch zoneOf(k) {
			case Zone:
				return Corefile{}, fmt.Errorf("%w: line %d already has a server block for %s (%s); remove it, or leave it and configure forwarding to octopus-dns yourself", ErrUnparsable, b.line, Zone, k)
			case ".":
				info.Reload = info.Reload || b.directives["reload"]
			}
		}
	}
	return info, nil
}

// Patch returns the Corefile with a server block that forwards Zone to the given servers
// (the octopus-dns Service). When the block is there already it is replaced, keeping the
// reverse zones PatchReverse put in it, so Patch is idempotent; nothing outside the block
// changes.
func Patch(corefile string, servers []netip.AddrPort) (string, error) {
	if len(servers) == 0 {
		return "", errors.New("patching the Corefile: no octopus-dns address to forward to")
	}
	if _, err := Inspect(corefile); err != nil {
		return "", err
	}
	targets := make([]string, 0, len(servers))
	for _, s := range servers {
		targets = append(targets, s.String())
	}
	_, reverse := managedContent(corefile)
	return render(corefile, targets, reverse), nil
}

// PatchReverse returns the Corefile with Octopus's block forwarding the reverse zones too
// (to the same servers as Zone), so that the cluster's DNS asks octopus-dns for the PTR records
// of other clusters' endpoints. Zones a server block of the user's already serves are left
// out: CoreDNS refuses a zone defined twice, and the user's block must keep its zone. A
// Corefile without Octopus's block is returned unchanged (changed false): the block is join's
// to add, and one removed by leave must stay removed.
func PatchReverse(corefile string, zones []string) (patched string, changed bool, err error) {
	info, err := Inspect(corefile)
	if err != nil {
		return "", false, err
	}
	if !info.Managed {
		return corefile, false, nil
	}
	var keep []string
	for _, z := range zones {
		z = strings.TrimSuffix(strings.ToLower(z), ".")
		if !slices.Contains(info.Zones, z) && !slices.Contains(keep, z) {
			keep = append(keep, z)
		}
	}
	slices.Sort(keep)
	targets, _ := managedContent(corefile)
	out := render(corefile, targets, keep)
	return out, out != corefile, nil
}

// ReverseZones returns the managed block's reverse zones, sorted; none without a block.
func ReverseZones(corefile string) []string {
	_, zones := managedContent(corefile)
	return zones
}

// render returns the Corefile without Octopus's block plus a new block forwarding Zone and
// the reverse zones to targets.
func render(corefile string, targets, reverse []string) string {
	original, _ := Unpatch(corefile)
	marker := beginMarker
	if original != "" && !strings.HasSuffix(original, "\n") {
		marker = beginMarkerNewline
		original += "\n"
	}
	keys := Zone + ":53"
	for _, z := range reverse {
		keys += " " + z + ":53"
	}
	// No cache: octopus-dns already caches nothing stale (its answers carry a 5 s TTL and
	// change with the endpoints), and a second cache here would only delay failover.
	return original + marker + "\n" +
		keys + " {\n" +
		"    errors\n" +
		"    forward . " + strings.Join(targets, " ") + "\n" +
		"}\n" +
		endMarker + "\n"
}

// managedContent reads back what render wrote into the managed block: the forward targets and
// the reverse zones. The block is Octopus's own text between its markers, so reading it by
// lines is exact.
func managedContent(corefile string) (targets, reverse []string) {
	begin, end, ok, err := managedBlock(corefile)
	if err != nil || !ok {
		return nil, nil
	}
	for _, line := range strings.Split(corefile[begin:end], "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) > 2 && fields[0] == "forward" && fields[1] == ".":
			targets = fields[2:]
		case len(fields) > 1 && fields[len(fields)-1] == "{":
			for _, k := range fields[:len(fields)-1] {
				if z := zoneOf(k); z != Zone {
					reverse = append(reverse, z)
				}
			}
		}
	}
	slices.Sort(reverse)
	return targets, reverse
}

// Unpatch removes Octopus's block and returns the Corefile as it was before Patch, and
// whether there was a block. A Corefile without the block is returned unchanged.
func Unpatch(corefile string) (string, bool) {
	begin, end, ok, err := managedBlock(corefile)
	if err != nil || !ok {
		return corefile, false
	}
	head := corefile[:begin]
	if strings.HasPrefix(corefile[begin:], beginMarkerNewline) {
		head = strings.TrimSuffix(head, "\n")
	}
	return head + corefile[end:], true
}

// managedBlock finds Octopus's block: [begin, end) spans from the begin marker's line to the
// end of the end marker's line. A begin marker without its end is an error: someone edited the
// block, and guessing where it ends could delete the user's lines.
func managedBlock(corefile string) (begin, end int, ok bool, err error) {
	begin = lineStart(corefile, beginMarker)
	if begin < 0 {
		begin = lineStart(corefile, beginMarkerNewline)
	}
	if begin < 0 {
		return 0, 0, false, nil
	}
	rel := lineStart(corefile[begin:], endMarker)
	if rel < 0 {
		return 0, 0, false, fmt.Errorf("%w: it has Octopus's begin marker but not %q; restore the block or delete both markers and everything between them", ErrUnparsable, endMarker)
	}
	end = begin + rel + len(endMarker)
	if end < len(corefile) && corefile[end] == '\n' {
		end++
	}
	return begin, end, true, nil
}

// lineStart returns the offset of the first line that is exactly line, or -1.
func lineStart(s, line string) int {
	for off := 0; off <= len(s); {
		next := strings.IndexByte(s[off:], '\n')
		cur := s[off:]
		if next >= 0 {
			cur = s[off : off+next]
		}
		if cur == line {
			return off
		}
		if next < 0 {
			return -1
		}
		off += next + 1
	}
	return -1
}

// serverBlock is one `keys { directives }` block of a Corefile.
type serverBlock struct {
	keys       []string
	line       int
	offset     int
	directives map[string]bool
}

// serverBlocks splits a Corefile into its server blocks with CoreDNS's own lexer. It checks
// the structure CoreDNS needs (every block has keys and balanced braces) but does not follow
// `import` directives: they name files inside the CoreDNS pod, not on this machine.
func serverBlocks(corefile string) ([]serverBlock, error) {
	d := caddyfile.NewDispenser("Corefile", strings.NewReader(corefile))
	lineOffsets := lineOffsets(corefile)
	var (
		blocks []serverBlock
		cur    *serverBlock
		depth  int
		// lastLine is the line of the previous token: a directive is the first token of a line
		// inside a block.
		lastLine int
	)
	for d.Next() {
		tok, line := d.Val(), d.Line()
		switch {
		case depth == 0 && tok == "}":
			return nil, fmt.Errorf("%w: line %d: unexpected }", ErrUnparsable, line)
		case depth == 0 && cur == nil && tok == "import" && line != lastLine:
			// A top-level import splices in server blocks from files inside the CoreDNS pod;
			// they stay opaque here.
			if !d.NextArg() {
				return nil, fmt.Errorf("%w: line %d: import without a file", ErrUnparsable, line)
			}
		case depth == 0 && tok == "{":
			if cur == nil {
				return nil, fmt.Errorf("%w: line %d: { without a zone before it", ErrUnparsable, line)
			}
			depth = 1
		case depth == 0:
			if cur == nil {
				cur = &serverBlock{line: line, offset: lineOffsets[min(line, len(lineOffsets))-1], directives: map[string]bool{}}
			}
			for _, k := range strings.Split(tok, ",") {
				if k != "" {
					cur.keys = append(cur.keys, k)
				}
			}
		case tok == "{":
			depth++
		case tok == "}":
			depth--
			if depth == 0 {
				blocks = append(blocks, *cur)
				cur = nil
			}
		case depth == 1 && line != lastLine:
			cur.directives[tok] = true
		}
		lastLine = line
	}
	switch {
	case depth > 0:
		return nil, fmt.Errorf("%w: the server block at line %d is missing its closing }", ErrUnparsable, cur.line)
	case cur != nil:
		return nil, fmt.Errorf("%w: line %d: %q is not followed by a { ... } block; Octopus can only add its zone to a Corefile whose server blocks are in braces", ErrUnparsable, cur.line, strings.Join(cur.keys, " "))
	}
	return blocks, nil
}

// lineOffsets returns the byte offset where each line (1-based line n at index n-1) begins.
func lineOffsets(s string) []int {
	offs := []int{0}
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			offs = append(offs, i+1)
		}
	}
	return offs
}

// zoneOf normalises a server block key ("dns://clusterset.local.:53") to its zone
// ("clusterset.local"); the root zone is ".".
func zoneOf(key string) string {
	k := strings.ToLower(key)
	if i := strings.Index(k, "://"); i >= 0 {
		k = k[i+3:]
	}
	if strings.HasPrefix(k, "[") {
		if i := strings.IndexByte(k, ']'); i >= 0 {
			k = k[:i+1]
		}
	} else if i := strings.LastIndexByte(k, ':'); i >= 0 {
		k = k[:i]
	}
	if k == "." || k == "" {
		return "."
	}
	return strings.TrimSuffix(k, ".")
}
