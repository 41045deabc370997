// Package mountns makes private mount namespaces for the lab: a holder process, made with
// util-linux's unshare, runs Script, which makes the mounts Ops lists and then holds the
// namespace; other processes enter it with nsenter. Go cannot run code between fork and exec,
// and setns of a mount namespace is refused to a multi-threaded process, hence the holder.
// Mounts are made inside the new namespace only, so the host's mount table never changes.
package mountns

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// Script runs in the new mount namespace of `unshare --mount --propagation private` and
// executes the operations of its arguments (see Ops), then prints "ready" and only holds the
// namespace. The mounts are made by the process that owns the namespace, after unshare
// created it, so they can never land in the host's mount namespace.
const Script = `set -e
while [ $# -gt 0 ]; do
  case "$1" in
  tmpfs) mount -t tmpfs lab-pod "$2"; shift 2 ;;
  overlay) mount -t overlay lab-pod -o "lowerdir=$2,upperdir=$3,workdir=$4" "$2"; shift 4 ;;
  mkdir) mkdir -p "$2"; shift 2 ;;
  touch) mkdir -p "$(dirname "$2")"; [ -e "$2" ] || : > "$2"; shift 2 ;;
  bind) mount --bind "$2" "$3"; shift 3 ;;
  ro) mount -o remount,bind,ro "$2"; shift 2 ;;
  rshared) mount --make-rshared /; shift ;;
  *) echo "unknown operation $1" >&2; exit 2 ;;
  esac
done
echo ready
exec sleep infinity`

// Bind is one bind mount of a namespace.
type Bind struct {
	Src, Target string
	ReadOnly    bool
}

// Ops turns bind mounts into Script operations. A target the host lacks (a
// volume at /etc/coredns) is made inside the pod's namespace only: its nearest existing
// ancestor is overlaid there with a writable layer on a tmpfs at scratch, so the pod sees
// the ancestor's content plus the new mount point and the host is not touched. Overlays come
// first, so the binds below them stay visible. Overlaying an ancestor hides the mounts under
// it from the pod (e.g. /run/netns for a volume under /var/run): lab pods don't use those.
func Ops(mounts []Bind, scratch string) ([]string, error) {
	var ops []string
	overlaid := map[string]bool{}
	var ancestors []string
	for _, m := range mounts {
		if _, err := os.Lstat(m.Target); err == nil {
			continue
		}
		a, err := existingAncestor(m.Target)
		if err != nil {
			return nil, err
		}
		if !overlaid[a] {
			overlaid[a] = true
			ancestors = append(ancestors, a)
		}
	}
	sort.Strings(ancestors) // parents before children
	if len(ancestors) > 0 {
		ops = append(ops, "tmpfs", scratch)
		for i, a := range ancestors {
			upper, work := filepath.Join(scratch, fmt.Sprintf("u%d", i)), filepath.Join(scratch, fmt.Sprintf("w%d", i))
			ops = append(ops, "mkdir", upper, "mkdir", work, "overlay", a, upper, work)
		}
	}
	sorted := slices.Clone(mounts)
	sort.SliceStable(sorted, func(i, j int) bool { return len(sorted[i].Target) < len(sorted[j].Target) })
	for _, m := range sorted {
		if _, err := os.Lstat(m.Target); err != nil {
			fi, err := os.Stat(m.Src)
			if err != nil {
				return nil, fmt.Errorf("mount source %s: %w", m.Src, err)
			}
			if fi.IsDir() {
				ops = append(ops, "mkdir", m.Target)
			} else {
				ops = append(ops, "touch", m.Target)
			}
		}
		ops = append(ops, "bind", m.Src, m.Target)
		if m.ReadOnly {
			ops = append(ops, "ro", m.Target)
		}
	}
	return ops, nil
}

// existingAncestor returns the nearest existing ancestor of path, symlinks resolved; the root
// is refused (an overlay there would be the whole machine).
func existingAncestor(path string) (string, error) {
	for d := filepath.Dir(filepath.Clean(path)); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			real, err := filepath.EvalSymlinks(d)
			if err != nil {
				return "", err
			}
			if real == "/" {
				return "", fmt.Errorf("mount point %s: no directory above it but / exists on this machine; the lab cannot make it", path)
			}
			return real, nil
		}
		if d == "/" {
			return "", fmt.Errorf("mount point %s: nothing above it exists", path)
		}
	}
}
