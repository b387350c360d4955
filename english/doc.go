// Package english words the messages that people read: counts ("1 node",
// "2 nodes"), and an error on one line without the names of the packages
// it passed through ("membership: invalid np" reads "invalid np"). The
// command line prints every error through OneLine, and so do the job
// pages.
package english
