# emulate.pl: rewrites a kernel file (.cu) for the emulated device (cuda_runtime.h here): dynamic
# shared memory becomes the emulator's buffer, and each launch kernel<<<grid, block, shared,
# stream>>>(args) (or kernel<template args><<<...) becomes run_grid("kernel", dim3(grid),
# dim3(block), meets, [&] { kernel<template args>(args); }), with
# meets true for a kernel that reaches __syncthreads, a warp shuffle, __syncwarp or a tensor-core
# operation (kernels/tensorcore.cuh: mma_*, ldmatrix*), itself or through the device functions it
# calls.
# usage: perl emulate.pl FILE.cu > FILE.cpp
local $/;
my $src = <>;
my (%body, %meets);
while ($src =~ /__(?:global|device)__[^\n(]*?(\w+)\(.*?\n\}\n/gs) { $body{$1} = $&; }
$meets{$_} = $body{$_} =~ /__syncthreads|__shfl|__syncwarp|\bmma_|\bldmatrix/ ? 1 : 0 for keys %body;
for my $round (1 .. 4) { # and functions that call such a function
    for my $f (keys %body) {
        $meets{$f} ||= grep { $meets{$_} && $_ ne $f && $body{$f} =~ /\b$_\(/ } keys %body;
    }
}
$src =~ s/extern __shared__ double (\w+)\[\];/double *$1 = shared_memory;/g;
# the first two launch arguments, split at their top-level comma
sub launch {
    my ($name, $targs, $cfg, $args) = @_;
    my ($depth, @parts, $cur) = (0);
    for my $c (split //, $cfg) {
        $depth++ if $c eq '(';
        $depth-- if $c eq ')';
        if ($c eq ',' && $depth == 0) { push @parts, $cur; $cur = ''; next }
        $cur .= $c;
    }
    push @parts, $cur;
    die "emulate.pl: no kernel $name" unless exists $meets{$name};
    my $m = $meets{$name} ? 'true' : 'false';
    return "run_grid(\"$name\", dim3($parts[0]), dim3($parts[1]), $m, [&] { $name$targs($args); });";
}
$src =~ s/(\w+)(<[^<>;]*>)?<<<(.*?)>>>\((.*?)\);/launch($1, $2 \/\/ '', $3, $4)/gse;
print $src;
