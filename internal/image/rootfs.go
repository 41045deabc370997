package image

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path"
	"strings"
)

// Executable returns the image files of the host program at hostPath, placed at imagePath, and
// of every shared library it loads, at the paths the dynamic loader looks for them (as ldd
// prints them): the minimal root filesystem in which the program runs. A static binary
// brings only itself.
func Executable(imagePath, hostPath string) ([]File, error) {
	files := []File{{Path: imagePath, Source: hostPath}}
	libs, err := sharedLibraries(hostPath)
	if err != nil {
		return nil, err
	}
	for _, l := range libs {
		files = append(files, File{Path: l, Source: l})
	}
	return files, nil
}

// sharedLibraries lists the absolute paths of the libraries (and the loader) a program needs,
// from glibc's ldd. ldd refuses static programs with "not a dynamic executable".
func sharedLibraries(program string) ([]string, error) {
	ldd, err := exec.LookPath("ldd")
	if err != nil {
		return nil, fmt.Errorf("finding the shared libraries of %s: ldd (Debian package libc-bin) is needed: %w", program, err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(ldd, program)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if strings.Contains(stdout.String()+stderr.String(), "not a dynamic executable") {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w: %s", program, err, strings.TrimSpace(stderr.String()))
	}
	return parseLdd(stdout.String())
}

// parseLdd reads ldd's output: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" for a
// library, "/lib64/ld-linux-x86-64.so.2 (0x...)" for the loader, and "linux-vdso.so.1 (0x...)"
// for the kernel's vDSO, which is no file.
func parseLdd(out string) ([]string, error) {
	var libs []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if strings.Contains(line, "=> not found") {
			return nil, fmt.Errorf("a shared library is missing on this machine: %s", line)
		}
		if _, after, ok := strings.Cut(line, "=> "); ok {
			line = after
		}
		file, _, _ := strings.Cut(line, " ")
		if path.IsAbs(file) {
			libs = append(libs, file)
		}
	}
	return libs, sc.Err()
}

// Busybox returns busybox at /bin/busybox with its libraries and a link /bin/<applet> for
// every applet it has, so that sh, sleep, wget and the rest run as in the busybox image.
func Busybox(hostPath string) ([]File, error) {
	files, err := Executable("/bin/busybox", hostPath)
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(hostPath, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("listing the applets of %s: %w", hostPath, err)
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet != "busybox" && !strings.Contains(applet, "/") {
			files = append(files, File{Path: "/bin/" + applet, Link: "busybox"})
		}
	}
	return files, nil
}
