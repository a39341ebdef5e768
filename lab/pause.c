/*
 * pause: the sandbox ("infra") process of an nri-trace lab pod.
 *
 * Same job as Kubernetes' pause container: hold the pod's namespaces open,
 * reap zombies (it is PID 1 of the pod's PID namespace when the pod shares
 * one), and exit 0 on SIGTERM/SIGINT so StopPodSandbox is quick and clean.
 * Built with `gcc -static -O2` so the image needs no libc.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig)
{
	/* Async-signal-safe: no stdio here. */
	(void)sig;
	_exit(0);
}

static void on_chld(int sig)
{
	int saved = errno;
	(void)sig;
	/* Reap every exited child; several SIGCHLDs may merge into one. */
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	errno = saved;
}

static int install(int sig, void (*handler)(int), int flags)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sa.sa_flags = flags;
	sigemptyset(&sa.sa_mask);
	return sigaction(sig, &sa, NULL);
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "-v") == 0) {
		printf("nri-trace lab pause\n");
		return 0;
	}
	if (getpid() != 1)
		/* Fine outside a PID namespace too; just say so, as k8s does. */
		fprintf(stderr, "pause: warning: not pid 1\n");

	if (install(SIGINT, on_term, 0) < 0 || install(SIGTERM, on_term, 0) < 0 ||
	    install(SIGCHLD, on_chld, SA_NOCLDSTOP | SA_RESTART) < 0) {
		perror("pause: sigaction");
		return 1;
	}
	for (;;)
		pause();
	/* not reached */
	return 42;
}
