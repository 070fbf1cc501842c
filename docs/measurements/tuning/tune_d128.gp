# Written by `flashrtc tune --plot`; draw with: gnuplot '/root/out/tune_d128.gp'
set terminal pngcairo size 960,720 font ',11'
set output '/root/out/tune_d128.png'
set title 'flashrtc tune: bf16 d=128 mask=none B=2 H=16 Nq=4096 Nk=4096 on NVIDIA H200 (sm_90a, quick space)' noenhanced
set xlabel 'block N (keys per pipeline stage)'
set ylabel 'block M (query rows per thread block)'
set cblabel 'TFLOP/s, best over warps and stages'
set xtics ("64" 0, "96" 1, "128" 2)
set ytics ("64" 0, "128" 1)
set xrange [-0.5:2.5]
set yrange [-0.5:1.5]
set palette defined (0 '#440154', 1 '#3b528b', 2 '#21918c', 3 '#5ec962', 4 '#fde725')
set style fill solid 1.0 noborder
unset key
$sweep << EOD
# block_n_index block_m_index tflops
0 0 328.223
1 0 324.234
2 0 331.491
0 1 365.514
1 1 311.184
2 1 318.736
EOD
$failed << EOD
# block_n_index block_m_index
EOD
plot $sweep using 1:2:(0.5):(0.5):3 with boxxyerror fillcolor palette, \
     $sweep using 1:2:(sprintf('%.1f', $3)) with labels textcolor 'white' font ',10'
