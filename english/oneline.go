package english

import (
	"regexp"
	"strings"
)

// OneLine is a message on one line, without the names of the packages
// the error passed through ("membership: invalid np" reads "invalid np").
func OneLine(s string) string {
	return packagePrefix.ReplaceAllString(strings.Join(strings.Fields(s), " "), "$1")
}

// packagePrefix matches the package names that the project's sentinel
// errors start with. A package whose errors start with its name is added
// here.
var packagePrefix = regexp.MustCompile(`(^|[\s(])(?:(?:membership|presence|coordinator|jobclient|registration|launcher|sidecar|handover|guard|bridge|jobcontroller|autoscaler|autoscale|localrun|embedetcd|etcdclient|etcdauth|kubetest): )+`)
