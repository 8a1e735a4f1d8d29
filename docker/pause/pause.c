/* Pod sandbox ("pause") process for the project's local Kubernetes cluster.
 * Holds the pod's namespaces, reaps zombie children (it is PID 1 when the pod shares its PID
 * namespace) and exits on SIGTERM/SIGINT. Built statically by scripts/k8s/images.sh. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) {
    (void)sig;
    _exit(0);
}

static void on_child(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(int argc, char **argv) {
    struct sigaction sa;
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        puts("triton-stress pause 1.0");
        return 0;
    }
    if (getpid() != 1) {
        fprintf(stderr, "pause: warning: not PID 1\n");
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_child;
    sa.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    for (;;) {
        pause();
    }
    return 42;
}
