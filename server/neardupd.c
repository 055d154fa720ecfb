/* neardupd.c - PLACEHOLDER: being written (issue 4). */
int main(void) { return 1; }
